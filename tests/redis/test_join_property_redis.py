"""Joins on Redis give the reference table (tests/integration/test_join_property.py):
two workers on the Redis broker, SIGKILLed at random, for a temporal join, a
stream-table join and a windowed join."""

from __future__ import annotations

import pytest

from rstreams.loader import load_topology
from rstreams.runtime.engine.supervisor import Supervisor
from tests.helpers.chaos import RandomKills
from tests.helpers.joincases import Case, write_case


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 5, 6])
def test_joins_on_redis_with_killed_workers_give_the_reference_table(
    tmp_path, redis_url, seed
) -> None:
    case = Case(seed, records=2000)
    pipeline, data = write_case(tmp_path, case)
    chaos = RandomKills(seed=seed, limit=3, records=len(case.events), gap=(0.2, 0.6))
    sup = Supervisor(
        str(pipeline), load_topology(str(pipeline)), {"events": str(data)},
        data_dir=tmp_path / "data", workers=2, chunk_lines=100, progress=chaos,
        broker=redis_url, max_restarts=10_000, max_ingest_rate=2_000,
        worker_args=["--commit-interval", "0.1", "--session-timeout", "2"],
    )  # fmt: skip
    chaos.supervisor = sup
    try:
        sup.run()
        got = sup.tables()["out"]
    finally:
        sup.close()
    assert chaos.kills == 3
    assert got == case.expected(), case.pipeline()
