"""Spark batch runs windowed reduce/aggregate (tumbling, hopping, session windows, both
emit modes) and joins without window (inner/left/outer, with and without ttl) with the
same final tables as the test driver.

The inputs are out of order by less than the grace periods: then stream time plays no
part on the driver either, which is what batch mode assumes (docs/windows.md, "Backends:
semantic differences"). The folds are not commutative (string concatenation, the last
three values), so they only match if Spark folds each key's records in source order.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams import (
    HoppingWindow,
    ProcessingError,
    SessionWindow,
    StreamBuilder,
    Topology,
    TumblingWindow,
    Windowed,
)
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark import run_spark
from rstreams.runtime.spark.segments import ErrorPolicy
from rstreams.runtime.spark.windows import SessionFold
from rstreams.testing import TopologyTestDriver

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
ORDERS = {"orders": DATA / "orders.jsonl", "payments": DATA / "payments.jsonl"}
GRACE = 60_000  # covers the disorder of the inputs below (at most 600 ms)
SPECS = {
    "tumbling": TumblingWindow(700, grace=GRACE),
    "hopping": HoppingWindow(1000, 300, grace=GRACE),
    "session": SessionWindow(400, grace=GRACE),
}


def driver_tables(topology: Topology, inputs: dict[str, Path]) -> dict[str, dict[Any, Any]]:
    """Pipe every line of every input (in source order, file after file), end the input
    and return each sink's final table."""
    with TopologyTestDriver(topology) as d:
        for topic, path in inputs.items():
            for line in path.read_text(encoding="utf-8").splitlines():
                d.pipe(topic, line.encode("utf-8"), timestamp=0)
        d.end_of_input()
        return {t: d.read_table(t) for t in topology.sink_topics}


def spark_tables(topology: Topology, inputs: dict[str, Path], spark: Any) -> dict[str, Any]:
    return run_spark(topology, {t: str(p) for t, p in inputs.items()}, spark=spark).tables


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<ts>\\t<user>\\t<item>`` lines about 100 ms apart, each up to 300 ms off, plus
    two records of user f exactly 400 ms (one session gap) and 401 ms apart."""
    rng = random.Random(7)
    lines = []
    for i in range(400):
        ts = 10_000 + i * 100 + rng.randint(-300, 300)
        lines.append(f"{ts}\t{rng.choice('abcde')}\t{rng.choice('xyzw')}{i}")
    lines += ["50000\tf\tp", "50400\tf\tq", "50801\tf\tr"]
    path = tmp_path_factory.mktemp("events") / "events.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def window_folds() -> Topology:
    """reduce and aggregate over each window type in both emit modes, session counts
    (sessions merged away, and the gap boundary) and a float sum (an exact fold on Spark
    too), all merged into one sink: their keys say which step made them (one Spark job)."""
    b = StreamBuilder("folds")
    items = (
        b.source("events")
        .selectTimestamp(lambda line: int(line.split("\t")[0]))
        .map(lambda line: line.split("\t", 1)[1])
    )
    results = []
    for emit in ("update", "close"):
        for kind, spec in SPECS.items():
            for op in ("reduce", "aggregate", "count"):
                name = f"{kind}-{op}-{emit}"
                w = items.keyBy(lambda v, n=name: f"{n}:{v[0]}").window(spec, emit=emit)
                if op == "reduce":
                    results.append(w.reduce(lambda acc, v: acc[-20:] + "|" + v[2:], name=name))
                elif op == "aggregate":
                    merger = (lambda a, b: (*a, *b)[-3:]) if kind == "session" else None
                    adder = lambda acc, v: (*acc, v[2:])[-3:]  # noqa: E731
                    results.append(w.aggregate(tuple, adder, merger, name=name))
                elif kind == "session":
                    results.append(w.count(name=name))
    w = items.keyBy(lambda v: f"float-sum:{v[0]}").window(SPECS["tumbling"])
    results.append(w.sum(lambda v: len(v) / 10, name="float-sum"))
    first, *rest = (r.toRStream() for r in results)
    first.merge(*rest).sink("folds", "msgpack")
    return b.build()


def by_step(table: dict[Windowed, Any]) -> dict[str, dict[Windowed, Any]]:
    out: dict[str, dict[Windowed, Any]] = {}
    for k, v in table.items():
        out.setdefault(k.key.split(":")[0], {})[k] = v
    return out


def test_window_folds_match_driver(events: Path, spark: Any) -> None:
    topology = window_folds()
    inputs = {"events": events}
    expected = by_step(driver_tables(topology, inputs)["folds"])
    got = by_step(spark_tables(topology, inputs, spark)["folds"])
    assert len(expected) == 15
    for step, table in expected.items():
        assert got[step] == table, step
    assert {type(v) for v in got["session-aggregate-close"].values()} == {tuple}
    assert {type(v) for v in got["float-sum"].values()} == {float}
    for emit in ("update", "close"):
        f = f"session-count-{emit}:f"
        # f@50000 and f@50400 are one session, f@50801 (401 ms later) another.
        assert got[f"session-count-{emit}"][Windowed(f, 50000, 50400)] == 2
        assert got[f"session-count-{emit}"][Windowed(f, 50801, 50801)] == 1
        # Update mode: a session merged away ends with None, which leaves the table (as
        # --output and the embedded runtime's tables leave it out).
        assert None not in got[f"session-reduce-{emit}"].values()


def test_session_fold_failure_names_the_step_and_the_line(events: Path, spark: Any) -> None:
    b = StreamBuilder("bad-fold")
    (
        b.source("events")
        .selectTimestamp(lambda line: int(line.split("\t")[0]))
        .keyBy(lambda line: line.split("\t")[1])
        .window(SessionWindow(400))
        .reduce(lambda acc, v: acc + v if "\tq" not in v else 1 / 0, name="fragile")
        .sink("out")
    )
    with pytest.raises(ProcessingError, match=r"'fragile'.*line 402.*ZeroDivisionError"):
        spark_tables(b.build(), {"events": events}, spark)


@pytest.fixture(scope="module")
def orders_and_payments(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One JSON-lines topic of interleaved orders and payments (so that records of
    either side meet earlier records of the other), 1 s apart. Ids 0 and 1 are never
    paid, ids 12 and 13 never ordered."""
    rng = random.Random(3)
    rows = []
    for i in range(300):
        kind = rng.choice(["order", "order", "pay"])
        ident = rng.randrange(12) if kind == "order" else rng.randrange(2, 14)
        rows.append({"kind": kind, "id": ident, "v": i, "ts": 1_000 * i})
    path = tmp_path_factory.mktemp("joins") / "events.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def table_joins() -> Topology:
    """inner/left/outer joins without window, with the default ttl and with a ttl that
    covers the input, over one topic split into two sides (records of either side meet
    earlier records of the other) and over two topics; all merged into one sink."""
    b = StreamBuilder("table-joins")
    events = b.source("events", deserializer="json").selectTimestamp(lambda e: e["ts"])
    split = (
        events.filter(lambda e: e["kind"] == "order"),
        events.filter(lambda e: e["kind"] == "pay"),
    )
    topics = (b.source("orders", deserializer="json"), b.source("payments", deserializer="json"))
    results = []
    for how in ("join", "leftJoin", "outerJoin"):
        for ttl in (None, timedelta(hours=1)):
            name = f"{how}-{'ttl' if ttl else 'default'}"
            left, right = split
            results.append(
                getattr(left, how)(right)
                .where(lambda o, n=name: f"{n}:{o['id']}")
                .equalTo(lambda p, n=name: f"{n}:{p['id']}")
                .apply(lambda o, p: [o and o["v"], p and p["v"]], name=name, ttl=ttl)
            )
        name = f"{how}-topics"
        left, right = topics
        results.append(
            getattr(left, how)(right)
            .where(lambda o, n=name: f"{n}:{o['order'] % 4}")
            .equalTo(lambda p, n=name: f"{n}:{p['order'] % 4}")
            .apply(lambda o, p: [o and o["amount"], p and p["paid"]], name=name)
        )
    results[0].merge(*results[1:]).sink("joined")
    return b.build()


def test_table_joins_match_driver(orders_and_payments: Path, spark: Any) -> None:
    inputs = {"events": orders_and_payments, **ORDERS}
    topology = table_joins()
    expected = driver_tables(topology, inputs)["joined"]
    got = spark_tables(topology, inputs, spark)["joined"]
    assert got == expected
    steps = {k.split(":")[0] for k in got}
    assert len(steps) == 9
    # Unmatched records: left joins emit (left, None), outer joins also (None, right).
    assert got["leftJoin-default:0"][1] is None
    assert got["outerJoin-default:13"][0] is None
    # Over the two topics (orders first): a key's left result stays unmatched only when
    # no payment has that key.
    paid = {json.loads(line)["order"] % 4 for line in ORDERS["payments"].read_text().splitlines()}
    for key in range(4):
        assert (got[f"leftJoin-topics:{key}"][1] is None) == (key not in paid), key
    assert "join-default:0" not in got


def test_temporal_join_ttl_is_the_same_rule_in_batch(orders_and_payments: Path, spark: Any) -> None:
    """ttl is a rule on timestamps (a version is valid for ttl after its time), so
    Spark batch applies it as the driver does."""

    def left_join(ttl: timedelta) -> Topology:
        b = StreamBuilder("ttl")
        events = b.source("events", deserializer="json").selectTimestamp(lambda e: e["ts"])
        (
            events.filter(lambda e: e["kind"] == "order")
            .leftJoin(events.filter(lambda e: e["kind"] == "pay"))
            .where(lambda o: o["id"])
            .equalTo(lambda p: p["id"])
            .apply(lambda o, p: [o["v"], p and p["v"]], ttl=ttl)
            .sink("out")
        )
        return b.build()

    inputs = {"events": orders_and_payments}
    got = spark_tables(left_join(timedelta(seconds=20)), inputs, spark)["out"]
    assert got == driver_tables(left_join(timedelta(seconds=20)), inputs)["out"]
    assert got != driver_tables(left_join(timedelta(days=1)), inputs)["out"]


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 60)), min_size=1, max_size=40),
    emit=st.sampled_from(["update", "close"]),
)
def test_session_fold_replays_the_driver_sessions(records: list[Any], emit: str) -> None:
    """SessionFold (the callable Spark runs over each key's records in source order)
    against the driver, on inputs in any order within grace: the same sessions, the
    same merges in the same order, the same None for sessions merged away."""
    b = StreamBuilder("sessions")
    (
        b.source("in")
        .keyBy(lambda v: v[0])
        .window(SessionWindow(5, grace=10**6), emit=emit)
        .aggregate(list, lambda acc, v: [*acc, v], lambda a, c: [*a, "+", *c], name="s")
        .sink("out")
    )
    with TopologyTestDriver(b.build()) as d:
        for i, (key, ts) in enumerate(records):
            d.pipe("in", f"{key}{i}", timestamp=ts)
        d.end_of_input()
        expected = {r.key: r.value for r in d.read("out")}  # (with the None of merges)

    node = b.pipeline.by_name["s"]
    fold = SessionFold("aggregate", "s", 5, emit == "close", enc.PACKED, ErrorPolicy(),
                       node.fn, node.initializer, node.merger)  # fmt: skip
    # As Spark hands them over: sorted by key, then source order.
    rows = sorted(
        ((enc.encode([key], enc.PACKED)[0][0].as_py(), ts, f"{key}{i}", i.to_bytes(4, "big"))
         for i, (key, ts) in enumerate(records)),
        key=lambda r: (r[0], r[3]),
    )  # fmt: skip
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.binary()),
            pa.array([r[1] for r in rows], pa.int64()),
            enc.encode([r[2] for r in rows], enc.PACKED)[0],
            pa.array([r[3] for r in rows], pa.binary()),
        ],
        names=["k_m", "_t", "v_m", enc.ORDER],
    )
    got: dict[Any, Any] = {}
    for out in fold(iter([batch])):
        keys = enc.decode([out.column("k_m")], enc.PACKED, out.num_rows)
        values = enc.decode([out.column(c) for c in enc.columns("v", enc.ANY)], enc.ANY, len(keys))
        got.update(zip(keys, values))
    assert got == expected
