"""Windowed aggregations and windowed joins: the same final tables on the test driver,
the embedded runtime and Spark batch, and on Structured Streaming for the windowed word
count (more streaming cases: tests/spark/test_streaming_windows_joins.py)."""

from __future__ import annotations

import json
import runpy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rstreams import HoppingWindow, JoinWindow, StreamBuilder, Topology, TumblingWindow, run
from rstreams.errors import UnsupportedOperation
from rstreams.runtime.spark import run_spark
from rstreams.testing import TopologyTestDriver
from rstreams.windowed import Windowed

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data"
ORDERS = {"orders": DATA / "orders.jsonl", "payments": DATA / "payments.jsonl"}
TIMED = {"timed-sentences": DATA / "timed_sentences.txt"}

EXAMPLES = {
    "windowed_wordcount": TIMED,
    "sessions": {"clicks": DATA / "clicks.jsonl"},
    "order_payment_join": ORDERS,
}


def driver_tables(topology: Topology, inputs: dict[str, Path]) -> dict[str, dict[Any, Any]]:
    # The driver keeps one stream time for both sides of a join: the lines of several
    # inputs go in the order their events happened, as one partition would hold them
    # (the embedded runtime tracks each input's time apart; batch has no stream time).
    records = [
        (json.loads(line)["ts"] if len(inputs) > 1 else 0, i, topic, line)
        for topic, path in inputs.items()
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines())
    ]
    with TopologyTestDriver(topology) as d:
        for _, _, topic, line in sorted(records, key=lambda r: r[:2]):
            d.pipe(topic, line.encode("utf-8"), timestamp=0)  # the raw line
        d.end_of_input()
        return {t: d.read_table(t) for t in topology.sink_topics}


def check_everywhere(topology: Topology, inputs: dict[str, Path], spark: Any) -> dict[str, Any]:
    expected = driver_tables(topology, inputs)
    assert all(expected.values()), "every sink produces something"
    paths = {t: str(p) for t, p in inputs.items()}
    assert run(topology, paths).tables == expected
    got = run_spark(topology, paths, spark=spark).tables
    for topic in topology.sink_topics:
        assert got[topic] == expected[topic], topic
    return got


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_examples_driver_embedded_spark_batch(example: str, spark: Any) -> None:
    topology = runpy.run_path(str(ROOT / "examples" / f"{example}.py"))["build"]().build()
    got = check_everywhere(topology, EXAMPLES[example], spark)
    for table in got.values():
        if example != "order_payment_join":
            assert all(isinstance(k, Windowed) for k in table)


def inner_join() -> Topology:
    b = StreamBuilder("inner-join")
    orders = b.source("orders", deserializer="json").selectTimestamp(lambda o: o["ts"])
    payments = b.source("payments", deserializer="json").selectTimestamp(lambda p: p["ts"])
    window = JoinWindow(timedelta(minutes=1), timedelta(minutes=3), grace=timedelta(hours=1))
    (
        orders.join(payments)
        .where(lambda o: o["order"])
        .equalTo(lambda p: p["order"])
        .window(window)
        .apply(lambda o, p: [o["amount"], p["paid"], max(o["ts"], p["ts"])], name="matched")
        .sink("matched")
    )
    (
        orders.outerJoin(payments)
        .where(lambda o: o["order"])
        .equalTo(lambda p: p["order"])
        .window(window)
        .apply(lambda o, p: (o and o["amount"], p and p["paid"]), name="both")
        .sink("both")
    )
    return b.build()


def test_inner_and_outer_windowed_join(spark: Any) -> None:
    got = check_everywhere(inner_join(), ORDERS, spark)
    assert got["matched"]  # some orders are paid within the window
    assert any(v[0] is None for v in got["both"].values())  # a payment without order


def windowed_aggregates() -> Topology:
    b = StreamBuilder("hopping")
    words = (
        b.source("timed-sentences")
        .selectTimestamp(lambda line: int(line.split("\t", 1)[0]))
        .map(lambda line: line.split("\t", 1)[1])
        .flatMap(str.split)
        .filter(lambda w: w.isalpha())
        .keyBy(lambda w: w[:1].lower())
    )
    hopping = words.window(HoppingWindow(timedelta(minutes=2), timedelta(minutes=1), grace=10**9))
    hopping.count(name="hop-count").sink("hop-count")
    hopping.sum(len, name="hop-sum").sink("hop-sum")
    tumbling = words.window(TumblingWindow(30_000, grace=10**9), emit="close")
    tumbling.max(len, name="max-len").sink("max-len")
    late = tumbling.min(len, name="min-len")
    late.sink("min-len")
    late.late().sink("late")
    return b.build()


def test_hopping_and_tumbling_aggregates(spark: Any) -> None:
    topology = windowed_aggregates()
    paths = {t: str(p) for t, p in TIMED.items()}
    expected = driver_tables(topology, TIMED)
    got = run_spark(topology, paths, spark=spark).tables
    assert got == expected  # "late" is empty on both: grace covers the input


def streaming_copy(tmp_path: Path, inputs: dict[str, Path]) -> dict[str, str]:
    """Structured Streaming reads directories: one directory per topic."""
    out = {}
    for topic, path in inputs.items():
        d = tmp_path / topic
        d.mkdir()
        (d / "part-1.txt").write_bytes(path.read_bytes())
        out[topic] = str(d)
    return out


def test_streaming_tumbling_window_matches_driver(spark: Any, tmp_path: Path) -> None:
    topology = runpy.run_path(str(ROOT / "examples" / "windowed_wordcount.py"))["build"]().build()
    got = run_spark(
        topology,
        streaming_copy(tmp_path, TIMED),
        spark=spark,
        streaming=True,
        checkpoint=str(tmp_path / "ck"),
    )
    assert got.tables == driver_tables(topology, TIMED)


def test_unsupported_window_steps_name_the_step(spark: Any) -> None:
    b = StreamBuilder("nope2")
    b.source("in").keyBy(lambda v: v).window(TumblingWindow(10)).count(name="untimed").sink("o")
    with pytest.raises(UnsupportedOperation, match=r"untimed.*selectTimestamp"):
        run_spark(b.build(), {"in": str(TIMED["timed-sentences"])}, spark=spark)
