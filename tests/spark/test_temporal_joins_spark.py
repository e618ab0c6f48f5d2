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
    expected = _driver_tables(topology, lines)["enriched"]
    for result in (batch, streamed):
        table = result.tables["enriched"]
        assert len(table) == 400
        assert {v["tier"] for v in table.values()} == {"gold"}
        assert table == expected


def _temporal_events(seed: int, count: int, grace: int) -> list[str]:
    """``{"id", "s", "k", "t"}`` lines: ties common, disorder within ``grace``, a few None
    keys."""
    import random

    rnd = random.Random(seed)
    top, out = 0, []
    for i in range(count):
        top += rnd.choice([0, 0, 1, 3])
        e = {
            "id": i,
            "s": rnd.choice("LR"),
            "k": None if rnd.random() < 0.04 else rnd.choice("abcde"),
            "t": max(0, top - rnd.randint(0, grace)),
        }
        out.append(json.dumps(e))
    # None keys out of time order (within grace): such results leave at once, in input
    # order.
    for i, (side, dt) in enumerate(["L0", "L2", "R0", "R2"]):
        out.append(json.dumps({"id": count + i, "s": side, "k": None, "t": top - int(dt)}))
    return out


def _temporal_joins(grace: int) -> Any:
    """Temporal inner/left/outer joins and a stream-table left join of two branches of
    one source, each result keyed by its join key: the last result of a key is the one
    of the key's latest record, by (time, position)."""
    from rstreams import StreamBuilder

    def pair(left: Any, right: Any) -> list[Any]:
        return [left and left["id"], right and right["id"]]

    b = StreamBuilder("temporal-vs-driver")
    events = b.source("events", deserializer="json").selectTimestamp(lambda e: e["t"])
    left = events.filter(lambda e: e["s"] == "L")
    right = events.filter(lambda e: e["s"] == "R")
    joins = {
        "inner": left.join(right),
        "left": left.leftJoin(right),
        "outer": left.outerJoin(right),
        "table": left.leftJoin(right.toTable()),
    }
    for name, joined in joins.items():
        joined.where(lambda e: e["k"]).equalTo(lambda e: e["k"]).apply(
            pair, name=name, grace=grace, ttl=8 if name == "left" else None
        ).sink(name)
    return b.build()


def _driver_tables(topology: Any, lines: list[str]) -> dict[str, dict[Any, Any]]:
    from rstreams.testing import TopologyTestDriver

    with TopologyTestDriver(topology) as driver:
        for line in lines:
            driver.pipe("events", line.encode("utf-8"), timestamp=0)
        driver.end_of_input()
        return {t: driver.read_table(t) for t in topology.sink_topics}


@pytest.mark.slow
def test_temporal_joins_with_ties_and_disorder_match_the_driver(tmp_path: Path, spark: Any) -> None:
    """Batch and Structured Streaming give the driver's final tables, where the order of
    results matters (the last result per join key)."""
    grace = 4
    lines = _temporal_events(11, 160, grace)
    topology = _temporal_joins(grace)
    expected = _driver_tables(topology, lines)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "events.jsonl").write_text("\n".join(lines) + "\n")
    batch = run_spark(topology, {"events": str(inbox / "events.jsonl")}, spark=spark)
    streamed = run_spark(
        topology, {"events": str(inbox)}, spark=spark, streaming=True,
        checkpoint=str(tmp_path / "checkpoint"),
    )  # fmt: skip
    for name in topology.sink_topics:
        assert batch.tables[name] == expected[name], name
        assert streamed.tables[name] == expected[name], name
    # The input exercises ties, unmatched and ttl-expired lookups.
    assert any(None in v for v in expected["left"].values())
    assert any(v[0] is None for v in expected["outer"].values())


def _replay(q: Any, rows: list[Any], out: list[Any], end: bool = False) -> None:
    """Replay ``(side, key, value, ts, _o)`` rows through a JoinQueue (and the end of
    input), appending the results' (key, value) to ``out``."""
    from rstreams.runtime.spark.stateful import LEFT, RIGHT

    def emit(key: Any, value: Any, ts: int, off: int) -> None:
        out.append((key, value))

    for side, key, value, ts, order in rows:
        q.record(LEFT if side == "L" else RIGHT, key, value, ts, emit, order=order)
    if end:
        q.end_of_input(emit)


def test_a_temporal_join_queue_restored_from_its_saved_state_goes_on_alike() -> None:
    """The replay's state (versions and waiting records, keyed by tuples with bytes
    positions) survives the msgpack round trip of the state store; a table join's state
    of an earlier version (latest value per key and side) is read as versions."""
    from rstreams.runtime.spark.stateful import JoinQueue, JoinSpec
    from rstreams.serde import INTERNAL_SERDE

    spec = JoinSpec("j", "outer", lambda lv, rv: [lv, rv], None, ttl=50, grace=5)
    rows = [
        ("R", "a", "silver", 10, b"\x00\x01"),
        ("L", "a", "o1", 12, b"\x00\x02"),
        ("R", ("t", 1), "x", 12, b"\x00\x03"),
        ("R", "a", "gold", 11, b"\x00\x04"),  # (disorder within grace: o1 meets gold)
        ("L", ("t", 1), "o2", 12, b"\x00\x05"),
        ("L", "a", "o3", 40, b"\x00\x06"),
        ("L", "a", "o4", 200, b"\x00\x07"),  # (gold expired)
    ]
    whole: list[Any] = []
    q = JoinQueue(spec, None)
    _replay(q, rows, whole, end=True)
    assert whole == [
        ("a", [None, "silver"]), ("a", [None, "gold"]), ("a", ["o1", "gold"]),
        (("t", 1), [None, "x"]), (("t", 1), ["o2", "x"]), ("a", ["o3", "gold"]),
        ("a", ["o4", None]),
    ]  # fmt: skip
    for cut in range(1, len(rows)):
        parts: list[Any] = []
        first = JoinQueue(spec, None)
        _replay(first, rows[:cut], parts)
        saved = INTERNAL_SERDE.deserialize(INTERNAL_SERDE.serialize(first.save()))
        second = JoinQueue(spec, saved)
        _replay(second, rows[cut:], parts, end=True)
        assert parts == whole, cut
    old = {"t": 11, "n": 2, "j": [["R", "a", 11, 0, "gold", False]], "h": []}
    out: list[Any] = []
    q = JoinQueue(spec, old)
    _replay(q, [("L", "a", "o5", 20, b"\x00\x09")], out, end=True)
    assert out == [("a", ["o5", "gold"])]
