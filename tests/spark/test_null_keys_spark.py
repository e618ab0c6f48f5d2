"""Null keys never match on Spark either, batch and Structured Streaming: aggregations
skip them, inner joins drop them, left/outer joins emit them unmatched at once; the
final tables are the test driver's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rstreams import JoinWindow, StreamBuilder, Topology, TumblingWindow
from rstreams.runtime.spark import run_spark
from rstreams.testing import TopologyTestDriver

pytestmark = pytest.mark.slow

EVENTS = [
    {"ts": 0, "side": "L", "k": "a", "v": 1},
    {"ts": 5, "side": "L", "k": None, "v": 2},
    {"ts": 10, "side": "R", "k": None, "v": 3},
    {"ts": 12, "side": "R", "k": "a", "v": 4},
    {"ts": 20, "side": "L", "k": None, "v": 5},
    {"ts": 30, "side": "R", "k": "b", "v": 6},
]
LINES = [json.dumps(e) for e in EVENTS]

EXPECTED = {
    "count": {"a": 2, "b": 1},
    "sum": {"a": 5, "b": 6},
    "reduce": {"a": ["a", 5], "b": ["b", 6]},
    "w-count": {"a": 2, "b": 1},
    "join-windowed": {"a": [[0, 1], [12, 4]]},
    "leftJoin-windowed": {"a": [[0, 1], [12, 4]], None: [[20, 5], None]},
    "outerJoin-table": {"a": [[0, 1], [12, 4]], None: [[20, 5], None], "b": [None, [30, 6]]},
}


def pipeline() -> Topology:
    b = StreamBuilder("null-keys")
    src = b.source("events", deserializer="json").selectTimestamp(lambda e: e["ts"])
    keyed = src.keyBy(lambda e: e["k"])
    keyed.count(name="count").sink("count")
    keyed.sum(lambda e: e["v"], name="sum").sink("sum")
    pairs = src.map(lambda e: [e["k"], e["v"]]).keyBy(lambda p: p[0])
    pairs.reduce(lambda a, p: [a[0], a[1] + p[1]], name="reduce").sink("reduce")
    keyed.window(TumblingWindow(100)).count(name="w-count").sink("w-count-windowed")
    left = src.filter(lambda e: e["side"] == "L")
    right = src.filter(lambda e: e["side"] == "R")

    def joiner(lv: Any, rv: Any) -> list[Any]:
        return [lv and [lv["ts"], lv["v"]], rv and [rv["ts"], rv["v"]]]

    for how, window in (("join", True), ("leftJoin", True), ("outerJoin", False)):
        name = f"{how}-{'windowed' if window else 'table'}"
        joined = getattr(left, how)(right).where(lambda e: e["k"]).equalTo(lambda e: e["k"])
        if window:
            joined = joined.window(JoinWindow(before=15, after=30, grace=10))
        joined.apply(joiner, name=name).sink(name)
    return b.build()


def plain(tables: dict[str, dict[Any, Any]]) -> dict[str, dict[Any, Any]]:
    """The windowed count's table by the window's key (one window holds everything)."""
    out = dict(tables)
    out["w-count"] = {w.key: v for w, v in out.pop("w-count-windowed").items()}
    return out


@pytest.fixture(scope="module")
def expected() -> dict[str, dict[Any, Any]]:
    topology = pipeline()
    with TopologyTestDriver(topology) as d:
        for line in LINES:
            d.pipe("events", line.encode(), timestamp=0)
        d.end_of_input()
        tables = plain({t: d.read_table(t) for t in topology.sink_topics})
    assert tables == EXPECTED
    return tables


@pytest.fixture
def two_state_partitions(spark: Any) -> Iterator[None]:
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", before)


def test_batch_null_keys_never_match(spark: Any, tmp_path: Path, expected: dict[str, Any]) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    result = run_spark(pipeline(), {"events": str(path)}, spark=spark)
    assert plain(result.tables) == expected


def test_streaming_null_keys_never_match(
    spark: Any, tmp_path: Path, expected: dict[str, Any], two_state_partitions: None
) -> None:
    inbox = tmp_path / "events"
    inbox.mkdir()
    (inbox / "part-0.jsonl").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    result = run_spark(
        pipeline(),
        {"events": str(inbox)},
        spark=spark,
        streaming=True,
        checkpoint=str(tmp_path / "checkpoint"),
    )
    assert plain(result.tables) == expected
