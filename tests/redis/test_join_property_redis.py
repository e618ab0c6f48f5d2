"""Joins on Redis give the reference table (tests/integration/test_join_property.py):
two workers on the Redis broker, SIGKILLed at random, for a temporal join, a
stream-table join and a windowed join; and the case of the joins issue."""

from __future__ import annotations

import pytest

from rstreams.loader import load_topology
from rstreams.runner import run
from tests.helpers.chaos import run_with_kills
from tests.helpers.joincases import ENRICH, Case, enrich_lines, write_case


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 5, 6])
def test_joins_on_redis_with_killed_workers_give_the_reference_table(
    tmp_path, redis_url, seed
) -> None:
    case = Case(seed, records=2000)
    pipeline, data = write_case(tmp_path, case)
    got = run_with_kills(
        pipeline, {"events": str(data)}, "out", tmp_path / "data", kills=3,
        records=len(case.events), seed=seed, broker=redis_url,
    )  # fmt: skip
    assert got == case.expected(), case.pipeline()


def test_the_issue_case_on_redis(tmp_path, redis_url) -> None:
    (tmp_path / "in.jsonl").write_text("\n".join(enrich_lines(50, 3000)) + "\n")
    (tmp_path / "enrich.py").write_text(ENRICH)
    table = run(
        load_topology(str(tmp_path / "enrich.py")), {"events": str(tmp_path / "in.jsonl")},
        chunk_lines=100, workers=2, data_dir=str(tmp_path / "d"), broker=redis_url,
        pipeline=str(tmp_path / "enrich.py"),
    ).tables["enriched"]  # fmt: skip
    assert len(table) == 3000
    assert {v["tier"] for v in table.values()} == {"gold"}
