"""Null keys never match (SQL, Kafka Streams' KIP-962), on the test driver.

A record whose join key is None is never stored or matched: an inner join drops it, a
left/outer side emits it unmatched at once. Aggregations skip records whose key is None.
Both count under ``null_keys`` in the metrics. Keys here are the text before ":", None
when it is empty.
"""

from __future__ import annotations

from typing import Any

import pytest

from rstreams import JoinWindow, SessionWindow, StreamBuilder, TumblingWindow
from rstreams.testing import TopologyTestDriver


def key_of(v: str) -> str | None:
    return v.split(":")[0] or None


def join(kind: str, window: JoinWindow | None) -> Any:
    b = StreamBuilder("j")
    joined = getattr(b.source("orders", queues=1), kind)(b.source("payments", queues=1))
    joined = joined.where(key_of).equalTo(key_of)
    if window is not None:
        joined = joined.window(window)
    joined.apply(lambda o, p: f"{o}|{p}", name="j", queues=1).sink("out")
    return b.build()


# Two orders and a payment without a key: none of them may meet.
JOIN_INPUT = [
    ("orders", "1:o1", 100),
    ("orders", ":o2", 101),
    ("payments", ":p1", 102),
    ("payments", "1:p2", 104),
    ("orders", ":o3", 105),
]
PAID = ("1", "1:o1|1:p2", 104)

# What each input record brings out at once, per join kind.
JOIN_OUTPUT = {
    "join": [[], [], [], [PAID], []],
    "leftJoin": [[], [(None, ":o2|None", 101)], [], [PAID], [(None, ":o3|None", 105)]],
    "outerJoin": [
        [],
        [(None, ":o2|None", 101)],
        [(None, "None|:p1", 102)],
        [PAID],
        [(None, ":o3|None", 105)],
    ],
}


WINDOWS = [JoinWindow(before=5, after=10), None]


@pytest.mark.parametrize("window", WINDOWS, ids=["windowed", "table"])
@pytest.mark.parametrize("kind", ["join", "leftJoin", "outerJoin"])
def test_null_join_keys_never_match(kind: str, window: JoinWindow | None) -> None:
    with TopologyTestDriver(join(kind, window)) as d:
        outputs = []
        for topic, value, ts in JOIN_INPUT:
            d.pipe(topic, value, timestamp=ts)
            outputs.append([(r.key, r.value, r.timestamp) for r in d.read("out")])
        state = d.state("j-j-store")
        assert d.metrics["null_keys"] == 3
    expected = [list(out) for out in JOIN_OUTPUT[kind]]
    if window is None:
        # A temporal join answers o1 once stream time passes 100 (at :o2, before the
        # null key's own result) and p2 once it passes 104 (at :o3): p2 meets the left
        # version as of 104, o1.
        if kind != "join":
            expected[1].insert(0, ("1", "1:o1|None", 100))
        expected[3] = []
        expected[4].insert(0, PAID)
    assert outputs == expected
    # Never buffered: only key "1" (and stream time) is in the join's state.
    assert all(None not in k for k in state), state


def test_a_null_key_left_record_comes_out_at_once_not_when_its_window_closes() -> None:
    topology = join("leftJoin", JoinWindow(before=5, after=10))
    with TopologyTestDriver(topology) as d:
        d.pipe("orders", ":o1", timestamp=100)
        at_once = [(r.key, r.value) for r in d.read("out")]
        d.pipe("orders", "2:o2", timestamp=300)  # stream time passes o1's window
        later = [(r.key, r.value) for r in d.read("out")]
    assert (at_once, later) == ([(None, ":o1|None")], [])


AGG_INPUT = ["a:1", ":2", "a:3", ":4", "b:5"]


def aggregated(op: str) -> Any:
    b = StreamBuilder("a")
    grouped = b.source("in", queues=1).keyBy(key_of)
    if op == "count":
        result = grouped.count(name="agg", queues=1)
    elif op == "sum":
        result = grouped.sum(lambda v: int(v.split(":")[1]), name="agg", queues=1)
    elif op == "reduce":
        result = grouped.reduce(lambda a, v: f"{a}+{v}", name="agg", queues=1)
    elif op == "aggregate":
        result = grouped.aggregate(lambda: 0, lambda acc, v: acc + 1, name="agg", queues=1)
    elif op == "windowed-count":
        result = grouped.window(TumblingWindow(100)).count(name="agg", queues=1)
    else:
        result = grouped.window(SessionWindow(10)).count(name="agg", queues=1)
    result.toRStream().sink("out")
    return b.build()


EXPECTED = {
    "count": [("a", 1), ("a", 2), ("b", 1)],
    "sum": [("a", 1), ("a", 4), ("b", 5)],
    "reduce": [("a", "a:1"), ("a", "a:1+a:3"), ("b", "b:5")],
    "aggregate": [("a", 1), ("a", 2), ("b", 1)],
    "windowed-count": [("a", 1), ("a", 2), ("b", 1)],
    "session-count": [("a", 1), ("a", None), ("a", 2), ("b", 1)],
}


@pytest.mark.parametrize("op", list(EXPECTED))
def test_aggregations_skip_null_keys(op: str) -> None:
    with TopologyTestDriver(aggregated(op)) as d:
        for i, value in enumerate(AGG_INPUT):
            d.pipe("in", value, timestamp=i)
        out = d.read("out")
        state = d.state("a-agg-store")
        assert d.metrics["null_keys"] == 2
    keys = [getattr(r.key, "key", r.key) for r in out]
    assert list(zip(keys, [r.value for r in out])) == EXPECTED[op]
    assert not any(None in (k if isinstance(k, tuple) else (k,)) for k in state), state


def test_an_aggregation_without_a_shuffle_skips_null_keys() -> None:
    b = StreamBuilder("g")
    b.source("in", queues=1).groupByKey().count(name="c").toRStream().sink("out")
    with TopologyTestDriver(b.build()) as d:
        d.pipe("in", "x", key=None)
        d.pipe("in", "y", key="k")
        d.pipe("in", "z", key=None)
        assert [(r.key, r.value) for r in d.read("out")] == [("k", 1)]
        assert d.state("g-c-store") == {"k": 1}
        assert d.metrics["null_keys"] == 2
