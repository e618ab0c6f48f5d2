"""Nexmark queries (examples/nexmark) against the plain-Python baseline
(bench/nexmark/baseline.py) on a small generated input: the same table, byte for byte
(a session merged into another is deleted from the table, not left as ``null``), in one
process, on two worker processes and on the test driver (the sink's records folded as
``--output`` folds them). tests/redis/test_nexmark_redis.py checks them on the Redis
broker, tests/spark/test_nexmark_spark.py on Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from rstreams.loader import load_topology
from rstreams.runtime.results import table_lines
from rstreams.testing import TopologyTestDriver
from tests.helpers.nexmark import (
    EXAMPLES,
    QUERIES,
    expected_lines,
    generate,
    run_cli,
    write_events,
)


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_events(tmp_path_factory.mktemp("nexmark") / "events.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["--in-memory"], ["--workers", "2"]], ids=["memory", "workers2"])
@pytest.mark.parametrize("query", QUERIES)
def test_each_query_equals_the_plain_python_baseline(
    tmp_path: Path, events: Path, query: str, mode: list[str]
) -> None:
    assert run_cli(query, events, tmp_path, *mode) == expected_lines(query, events, tmp_path)


@pytest.mark.parametrize("query", QUERIES)
def test_each_query_on_the_test_driver_equals_the_plain_python_baseline(
    tmp_path: Path, events: Path, query: str
) -> None:
    """Each line piped as the raw bytes ``--input`` gives (the timestamp does not matter:
    the windowed queries select theirs), the input ended, and the sink's table read as
    ``--output`` keeps it (``read_table``: a session merged into another is left out)."""
    topology = load_topology(str(EXAMPLES / f"{query}.py"))
    (sink,) = topology.sink_topics
    with TopologyTestDriver(topology) as driver:
        with events.open("rb") as f:
            for line in f:
                driver.pipe("events", line.rstrip(b"\n"), timestamp=0)
        driver.end_of_input()
        table = driver.read_table(sink)
    got = "".join(table_lines(table)).splitlines()
    assert got == expected_lines(query, events, tmp_path)


def test_the_generator_keeps_nexmark_s_shape(tmp_path: Path) -> None:
    events = list(generate.events(5_000, seed=3, rate=1000))
    kinds = [e["event_type"] for e in events]
    assert (kinds.count(0), kinds.count(1), kinds.count(2)) == (100, 300, 4600)  # 1:3:46
    times = [e[("person", "auction", "bid")[e["event_type"]]]["dateTime"] for e in events]
    # Out of order by less than 4 s (Nexmark's watermark is dateTime - 4 s).
    assert max(max(times[: i + 1]) - t for i, t in enumerate(times)) < 4_000
    bids = [e["bid"] for e in events if e["event_type"] == 2]
    assert len({(b["auction"], b["bidder"], b["dateTime"]) for b in bids}) == len(bids)
    assert list(generate.events(50, seed=3)) == events[:50]  # (the same seed, the same file)
