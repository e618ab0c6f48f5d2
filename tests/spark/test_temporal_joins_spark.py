"""Joins on Spark give the reference table of tests/helpers/joincases.py (the property
test of tests/integration/test_join_property.py), batch and Structured Streaming, and
the enrichment of the joins issue: one file of customers (silver, then gold) and
orders, no timestamps: every order meets gold."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rstreams.loader import load_topology
from rstreams.runtime.spark import run_spark
from tests.helpers.joincases import ENRICH, Case, enrich_lines, write_case


@pytest.fixture(autouse=True)
def two_state_partitions(spark: Any) -> Iterator[None]:
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", before)


# temporal outer, stream-table left, windowed inner, temporal left with ttl and ties
SEEDS = [2, 4, 6, 10]


@pytest.mark.slow
def test_batch_and_streaming_joins_give_the_reference_table(tmp_path: Path, spark: Any) -> None:
    for seed in SEEDS:
        case = Case(seed, records=200)
        pipeline, data = write_case(tmp_path, case)
        batch = run_spark(load_topology(str(pipeline)), {"events": str(data)}, spark=spark)
        assert batch.tables["out"] == case.expected(), (seed, case.pipeline())
        # Streaming: one stateful step per query, so the pairs keyed by themselves.
        (tmp_path / f"s{seed}.py").write_text(case.pipeline(counted=False))
        inbox = tmp_path / f"inbox{seed}"
        inbox.mkdir()
        (inbox / "part-0.jsonl").write_text(data.read_text())
        streamed = run_spark(
            load_topology(str(tmp_path / f"s{seed}.py")), {"events": str(inbox)}, spark=spark,
            streaming=True, checkpoint=str(tmp_path / f"checkpoint{seed}"),
        ).tables["out"]  # fmt: skip
        assert set(streamed) == set(case.expected()), (seed, case.pipeline())
        assert all(json.loads(k) == v for k, v in streamed.items())


@pytest.mark.slow
def test_the_issue_case_on_spark_batch_and_streaming(tmp_path: Path, spark: Any) -> None:
    lines = enrich_lines(20, 400)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "events.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "enrich.py").write_text(ENRICH)
    topology = load_topology(str(tmp_path / "enrich.py"))
    batch = run_spark(topology, {"events": str(inbox / "events.jsonl")}, spark=spark)
    streamed = run_spark(
        topology, {"events": str(inbox)}, spark=spark, streaming=True,
        checkpoint=str(tmp_path / "checkpoint"),
    )  # fmt: skip
    for result in (batch, streamed):
        table = result.tables["enriched"]
        assert len(table) == 400
        assert {v["tier"] for v in table.values()} == {"gold"}
