"""Windows, sessions, ``.late()`` and joins on Spark Structured Streaming: the same
final tables as the test driver (which ends the input, as a bounded run does), also
when the input comes in two runs on one checkpoint.

The inputs are out of order by more than the grace periods, so records are late, windows
and sessions close and join records expire while the input is still coming: what the
per-queue replay of the embedded processors (``rstreams.runtime.spark.stateful``) has
to get right. Each ``run_spark`` call runs one streaming query per sink; the pipelines
below put several steps behind one source to keep the number of Spark jobs small.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rstreams import (
    HoppingWindow,
    JoinWindow,
    SessionWindow,
    StreamBuilder,
    Topology,
    TumblingWindow,
)
from rstreams.errors import UnsupportedOperation
from rstreams.runtime.spark import run_spark
from rstreams.testing import TopologyTestDriver
from rstreams.windowed import Windowed

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def two_state_partitions(spark: Any) -> Iterator[None]:
    """Every shuffle partition of a stateful streaming step opens its state store in
    every micro-batch: two (not the session's four) halve the time of these queries."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", before)


def events(seed: int, count: int, sides: bool = False) -> list[str]:
    """JSON lines ``{"ts", "k", "v"[, "side"]}``: time runs forward ~7 ms per record,
    each record up to 60 ms early (late by more than any grace below) or 10 ms ahead."""
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        e: dict[str, Any] = {
            "ts": max(0, i * 7 + rnd.randint(-60, 10)),
            "k": rnd.choice("abcd"),
            "v": rnd.randint(0, 9),
        }
        if sides:
            e["side"] = rnd.choice("LR")
        out.append(json.dumps(e))
    return out


def driver_tables(topology: Topology, parts: list[list[str]]) -> dict[str, dict[Any, Any]]:
    """Final tables on the test driver; each part of the input is a bounded run."""
    tables: dict[str, dict[Any, Any]] = {t: {} for t in topology.sink_topics}
    with TopologyTestDriver(topology) as d:
        for part in parts:
            for line in part:
                d.pipe("events", line.encode("utf-8"), timestamp=0)
            d.end_of_input()
        for t in topology.sink_topics:
            tables[t].update(d.read_table(t))
    return tables


def spark_runs(
    topology: Topology, parts: list[list[str]], spark: Any, tmp_path: Path, counted: bool = True
) -> list[dict[str, dict[Any, Any]]]:
    """One bounded streaming run per part, each adding a file, on one checkpoint.

    ``counted``: some query reads the source once (a query that reads it for both
    sides of a join counts each line twice in Spark's progress)."""
    inbox = tmp_path / "events"
    inbox.mkdir()
    out = []
    for i, part in enumerate(parts):
        (inbox / f"part-{i}.jsonl").write_text("\n".join(part) + "\n", encoding="utf-8")
        result = run_spark(
            topology,
            {"events": str(inbox)},
            spark=spark,
            streaming=True,
            checkpoint=str(tmp_path / "checkpoint"),
        )
        if counted:
            assert result.records_in == len(part)  # end-of-input markers are not records
        out.append(result.tables)
    return out


def check(topology: Topology, got: dict[str, Any], expected: dict[str, Any]) -> None:
    for topic in topology.sink_topics:
        assert got[topic] == expected[topic], topic


def windows() -> Topology:
    """Sessions (count, reduce, aggregate; update and close), tumbling/hopping
    reduce/aggregate (update and close) and two late side outputs."""
    b = StreamBuilder("stream-windows")
    keyed = (
        b.source("events", deserializer="json")
        .selectTimestamp(lambda e: e["ts"])
        .keyBy(lambda e: e["k"])
    )
    sessions = keyed.window(SessionWindow(25, grace=20))
    sessions.count(name="s-count").sink("s-count")
    sessions.reduce(
        lambda a, e: {"ts": max(a["ts"], e["ts"]), "v": a["v"] * 10 + e["v"], "k": e["k"]},
        name="s-reduce",
    ).sink("s-reduce")
    closed = keyed.window(SessionWindow(25, grace=20), emit="close").aggregate(
        list, lambda acc, e: [*acc, e["v"]], merger=lambda a, b: a + b, name="s-agg"
    )
    closed.sink("s-agg")
    closed.late().map(lambda e: e["ts"]).sink("s-late")
    keyed.window(TumblingWindow(100, grace=30)).aggregate(
        tuple, lambda acc, e: (*acc, e["v"])[-3:], name="t-agg"
    ).sink("t-agg")
    hopping = keyed.window(HoppingWindow(60, 30), emit="close").reduce(
        lambda a, e: {"ts": e["ts"], "v": max(a["v"], e["v"]), "k": e["k"]}, name="h-reduce"
    )
    hopping.sink("h-reduce")
    hopping.late().sink("h-late")
    return b.build()


def test_windows_sessions_and_late_match_the_driver(spark: Any, tmp_path: Path) -> None:
    topology = windows()
    lines = events(1, 240)
    expected = driver_tables(topology, [lines])
    (got,) = spark_runs(topology, [lines], spark, tmp_path)
    check(topology, got, expected)
    # The input exercises what the replay is for:
    assert expected["s-late"] and expected["h-late"]  # late records
    with TopologyTestDriver(topology) as d:  # a session merged away (update mode)
        for line in lines:
            d.pipe("events", line.encode("utf-8"), timestamp=0)
        d.end_of_input()
        assert any(r.value is None for r in d.read("s-reduce"))
    closed = {k.closed for k in got["s-agg"]} | {k.closed for k in got["h-reduce"]}
    assert closed == {"event-time", "end-of-input"}
    assert all(isinstance(k, Windowed) for k in got["t-agg"])


def joins() -> Topology:
    """Windowed and table joins, inner/left/outer, of two sides of one source."""
    b = StreamBuilder("stream-joins")
    src = b.source("events", deserializer="json")
    left = src.filter(lambda e: e["side"] == "L").selectTimestamp(lambda e: e["ts"])
    right = src.filter(lambda e: e["side"] == "R").selectTimestamp(lambda e: e["ts"])

    def joiner(lv: Any, rv: Any) -> list[Any]:
        return [lv and [lv["ts"], lv["v"]], rv and [rv["ts"], rv["v"]]]

    window = JoinWindow(before=15, after=30, grace=10)
    for how in ("join", "leftJoin", "outerJoin"):
        for windowed in (True, False):
            name = f"{how}-{'windowed' if windowed else 'table'}"
            joined = getattr(left, how)(right).where(lambda e: e["k"]).equalTo(lambda e: e["k"])
            if windowed:
                joined = joined.window(window)
            ttl = None if windowed else 60
            joined.apply(joiner, name=name, ttl=ttl).sink(name)
    return b.build()


def test_windowed_and_table_joins_match_the_driver(spark: Any, tmp_path: Path) -> None:
    topology = joins()
    lines = events(2, 160, sides=True)
    expected = driver_tables(topology, [lines])
    (got,) = spark_runs(topology, [lines], spark, tmp_path, counted=False)
    check(topology, got, expected)
    # Unmatched results are the last ones of some keys.
    assert any(None in v for v in expected["outerJoin-windowed"].values())


def restarted() -> Topology:
    b = StreamBuilder("stream-restart")
    src = b.source("events", deserializer="json").selectTimestamp(lambda e: e["ts"])
    src.keyBy(lambda e: e["k"]).window(SessionWindow(25, grace=20), emit="close").count(
        name="sessions"
    ).sink("sessions")
    left = src.filter(lambda e: e["side"] == "L")
    right = src.filter(lambda e: e["side"] == "R")
    left.outerJoin(right).where(lambda e: e["k"]).equalTo(lambda e: e["k"]).window(
        JoinWindow(before=15, after=30, grace=10)
    ).apply(lambda lv, rv: [lv and lv["v"], rv and rv["v"]], name="pairs").sink("pairs")
    return b.build()


def test_restart_continues_from_the_checkpoint(spark: Any, tmp_path: Path) -> None:
    """Input in two files, one bounded run each on one checkpoint: the same tables as the
    driver given the same two bounded runs (each run's end of input closes its sessions
    and emits its unmatched join records; stream time carries over)."""
    topology = restarted()
    lines = events(3, 160, sides=True)
    parts = [lines[:90], lines[90:]]
    first, second = spark_runs(topology, parts, spark, tmp_path)
    check(topology, first, driver_tables(topology, parts[:1]))
    check(topology, second, driver_tables(topology, parts))
    assert len(second["sessions"]) > len(first["sessions"])


def test_two_stateful_steps_in_one_query_are_refused_by_name(spark: Any, tmp_path: Path) -> None:
    b = StreamBuilder("two-stateful")
    src = b.source("events", deserializer="json").selectTimestamp(lambda e: e["ts"])
    joined = (
        src.join(src.filter(lambda e: e["v"] > 4))
        .where(lambda e: e["k"])
        .equalTo(lambda e: e["k"])
        .window(JoinWindow(10, 10))
        .apply(lambda a, c: a)
    )
    joined.selectTimestamp(lambda e: e["ts"]).keyBy(lambda e: e["k"]).window(
        TumblingWindow(100)
    ).count(name="after-join").sink("out")
    inbox = tmp_path / "events"
    inbox.mkdir()
    with pytest.raises(UnsupportedOperation, match=r"'after-join'.*one stateful step"):
        run_spark(
            b.build(),
            {"events": str(inbox)},
            spark=spark,
            streaming=True,
            checkpoint=str(tmp_path / "ck"),
        )
