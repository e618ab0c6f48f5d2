"""Joins give one table for any split of the input: a property test against a reference.

Random inputs (keys, ties, disorder within grace, null keys) joined by every join kind
(inner, left, outer) in every form (temporal join of two streams, stream-table join,
windowed join) with random queue counts (1 to 16, source and join), run on the test
driver, in memory and durably (1 or 2 workers, random chunk sizes, workers SIGKILLed at
random): every run's table must equal what a plain reference computes (sort by time and
position, walk once). The table counts each ``(left id, right id)`` result, so a result
lost, doubled or joined to the wrong version shows. Redis and Spark run the same cases
(tests/redis/test_join_property_redis.py, tests/spark/test_temporal_joins_spark.py).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rstreams.loader import load_topology
from rstreams.runner import run
from rstreams.testing import TopologyTestDriver
from tests.helpers.chaos import run_with_kills
from tests.helpers.joincases import ENRICH, Case, enrich_lines, write_case


def _driver_table(pipeline: Path, case: Case) -> dict[str, int]:
    with TopologyTestDriver(load_topology(str(pipeline))) as driver:
        for line in case.lines:
            driver.pipe("events", line)
        driver.end_of_input()
        return driver.read_table("out")


@pytest.mark.parametrize("seed", range(18))
def test_driver_and_in_memory_runs_equal_the_reference(tmp_path, seed) -> None:
    case = Case(seed)
    pipeline, data = write_case(tmp_path, case)
    expected = case.expected()
    assert _driver_table(pipeline, case) == expected, case.pipeline()
    topology = load_topology(str(pipeline))
    chunk = random.Random(seed).choice([7, 50, 1000])
    got = run(topology, {"events": str(data)}, chunk_lines=chunk).tables["out"]
    assert got == expected, case.pipeline()


@pytest.mark.parametrize("seed", [6, 7, 8, 15])
def test_a_windowed_join_of_two_branches_of_one_queue_equals_the_reference(tmp_path, seed) -> None:
    # One source queue: one producer sends both sides, a batch's left branch before its
    # right one. A time told record by record ran ahead of the right side, and the join
    # expired left records the right side had still to match (exit 0, pairs missing).
    case = Case(seed)
    assert case.form == "windowed"
    case.source_queues = 1
    pipeline, data = write_case(tmp_path, case)
    topology = load_topology(str(pipeline))
    assert run(topology, {"events": str(data)}, chunk_lines=1000).tables["out"] == (
        case.expected()
    ), case.pipeline()


# (seed 0 in ./dev test --fast: a durable run with 1 and 2 worker processes)
@pytest.mark.parametrize("seed", [pytest.param(0, marks=pytest.mark.fast), 4, 8])
def test_durable_runs_with_one_or_two_workers_equal_the_reference(tmp_path, seed) -> None:
    case = Case(seed)
    pipeline, data = write_case(tmp_path, case)
    topology = load_topology(str(pipeline))
    for workers in (1, 2):
        chunk = random.Random(seed + workers).choice([20, 100, 500])
        got = run(
            topology, {"events": str(data)}, chunk_lines=chunk, workers=workers,
            data_dir=str(tmp_path / f"d{workers}"), pipeline=str(pipeline),
        ).tables["out"]  # fmt: skip
        assert got == case.expected(), (workers, case.pipeline())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 5, 6])
def test_workers_killed_at_random_give_the_reference_table(tmp_path, seed) -> None:
    case = Case(seed, records=2400)
    pipeline, data = write_case(tmp_path, case)
    got = run_with_kills(
        pipeline, {"events": str(data)}, "out", tmp_path / "data", kills=4,
        records=len(case.events), seed=seed,
    )  # fmt: skip
    assert got == case.expected(), case.pipeline()


def test_the_issue_case_every_order_meets_the_latest_customer(tmp_path) -> None:
    (tmp_path / "in.jsonl").write_text("\n".join(enrich_lines(50, 3000)) + "\n")
    (tmp_path / "enrich.py").write_text(ENRICH)
    topology = load_topology(str(tmp_path / "enrich.py"))
    inputs = {"events": str(tmp_path / "in.jsonl")}
    tables = [
        run(topology, inputs, chunk_lines=37).tables["enriched"],
        run(
            topology,
            inputs,
            chunk_lines=100,
            workers=2,
            data_dir=str(tmp_path / "d"),
            pipeline=str(tmp_path / "enrich.py"),
        ).tables["enriched"],
    ]
    with TopologyTestDriver(topology) as driver:
        for line in enrich_lines(50, 3000):
            driver.pipe("events", line)
        driver.end_of_input()
        tables.append(driver.read_table("enriched"))
    for table in tables:
        assert len(table) == 3000
        assert {v["tier"] for v in table.values()} == {"gold"}


def test_two_runs_of_a_join_write_byte_identical_output_files(tmp_path) -> None:
    import subprocess
    import sys

    case = Case(2, records=1500)  # a temporal outer join, 16-way splits at random
    pipeline, data = write_case(tmp_path, case)
    outputs = []
    for i, mode in enumerate((["--workers", "2"], ["--workers", "2"], ["--in-memory"])):
        out = tmp_path / f"out{i}.jsonl"
        args = [sys.executable, "-m", "rstreams", "run", str(pipeline), "--input", str(data)]
        args += ["--output", str(out), "--data-dir", str(tmp_path / f"d{i}"), "-q", *mode]
        r = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    table = {json.loads(line)["key"]: json.loads(line)["value"] for line in outputs[0].splitlines()}
    assert table == case.expected()
    # What the join holds at the end, by `rstreams state sizes`: versions bounded by
    # the keys (the latest per key and side, plus those within grace of the end).
    where = ["--data-dir", str(tmp_path / "d0"), "--job", f"jp{case.seed}"]
    state = [sys.executable, "-m", "rstreams", "state"]
    listed = subprocess.run([*state, "list", *where], capture_output=True, text=True)
    (store,) = [line.split("\t")[0] for line in listed.stdout.splitlines() if "-j-" in line]
    sizes = subprocess.run([*state, "sizes", store, *where], capture_output=True, text=True)
    assert sizes.returncode == 0, sizes.stderr
    counts: dict[str, int] = {}
    for line in sizes.stdout.splitlines():
        for field in line.split("\t")[1:]:
            name, _, value = field.partition("=")
            counts[name] = counts.get(name, 0) + int(value)
    keys = len({e["k"] for e in case.events if e["k"] is not None})
    assert 0 < counts["join_keys"] <= 2 * keys
    assert counts["join_versions"] <= 2 * keys + 40
    assert "join_waiting" not in counts  # the end of input answered every record
