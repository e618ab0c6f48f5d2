"""The test driver's fast path gives exactly what one record at a time through columns
gives (Hypothesis).

The driver hands each record to its task as a batch of one (``Task.process_records``,
the engine's own path: sinks and sources have one path), and commits are prepared
after every pipe and written later. The reference here is the driver as it was
before: a whole commit of the tasks a pipe made work after every pipe, with each
record's columns as the broker gives them. For every processor kind (count,
aggregate, reduce, each window type in each emit mode, sessions, every join, a branch,
a merge), each error policy, and inputs that make user functions, deserializers,
serializers and state stores fail, both must give the same outputs (keys, values,
timestamps, queues, offsets, in order, dead letters included), the same state, the same
metrics and the same errors raised by the same calls.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams import (
    HoppingWindow,
    JoinWindow,
    SessionWindow,
    StreamBuilder,
    TumblingWindow,
)
from rstreams.planner.topology import Topology
from rstreams.runtime.engine.operators.context import dead_letter_topic
from rstreams.runtime.queues.base import RecordColumns
from rstreams.serde import FunctionSerde
from rstreams.testing import TopologyTestDriver

EXAMPLES = settings(max_examples=60, deadline=None)


class OneAtATimeDriver(TopologyTestDriver):
    """The reference: each record as columns through ``Task._process``, and a whole
    commit of the tasks a pipe made work after every pipe."""

    def _drain(self, commit_all: bool = False) -> None:
        pending = self._producer.unprocessed
        readers = self._engine.readers
        touched = self._uncommitted
        while True:
            while pending:
                topic, q, offset, ts, key, value, headers = pending.popleft()
                task = readers.get((topic, q))
                if task is None:
                    continue
                touched[task] = None
                if task.positions[topic] == offset:
                    task.positions[topic] = offset + 1
                    one = range(offset, offset + 1)
                    task.process_records(
                        topic, RecordColumns(one, (ts,), (key,), (value,), (headers,))
                    )
                else:
                    task.process_next(topic)
                if self._timed_steps:
                    self._share_time(touched)  # one time per step, after each record
            if commit_all:
                self._engine.commit()
            elif touched:
                self._engine.commit(touched)
            touched.clear()
            if not pending:
                return


# -- user functions that fail on chosen values -----------------------------------------


def word(v: Any) -> str:
    if v == "boom":
        raise ValueError("boom")
    return str(v)


def grow(acc: Any, v: Any) -> Any:
    # "set" makes an aggregate that can not be stored: the commit fails, not the record.
    if v == "set":
        return {1, 2}
    if v == "oops":
        raise KeyError(v)
    return acc + len(str(v))


def longer(a: str, b: str) -> str:
    if "boom" in (a, b):
        raise ValueError("reduce")
    return a if len(a) >= len(b) else b


def to_sink(v: Any) -> Any:
    return {v} if v == "nojson" else v  # a set is no JSON: the sink fails


REPR = FunctionSerde(serialize=lambda v: repr(v).encode(), deserialize=bytes.decode)


def key_of(v: Any) -> str:
    return str(v)[:1]


# -- the topologies ---------------------------------------------------------------------


def counting() -> Topology:
    b = StreamBuilder("c")
    b.source("in").map(word).keyBy(key_of).count(queues=3).toRStream().map(to_sink).sink("out")
    return b.build()


def aggregating() -> Topology:
    b = StreamBuilder("a")
    table = b.source("in").keyBy(key_of).aggregate(lambda: 0, grow, queues=2)
    table.sink("out", serializer=REPR)  # a set too
    return b.build()


def reducing() -> Topology:
    b = StreamBuilder("r")
    b.source("in").map(word).keyBy(key_of).reduce(longer, queues=2).sink("out")
    return b.build()


def windowed(spec: Any, emit: str) -> Callable[[], Topology]:
    def build() -> Topology:
        b = StreamBuilder("w")
        ws = b.source("in").keyBy(key_of).window(spec, emit=emit)
        table = ws.count(queues=2)
        table.sink("out")
        table.late().sink("late")
        return b.build()

    return build


def joining(kind: str) -> Callable[[], Topology]:
    def build() -> Topology:
        b = StreamBuilder("j")
        left, right = b.source("in"), b.source("other")
        (
            getattr(left, kind)(right)
            .where(key_of)
            .equalTo(key_of)
            .window(JoinWindow(before=5, after=5, grace=3))
            .apply(lambda a, c: f"{a}|{c}", queues=2)
            .sink("out")
        )
        return b.build()

    return build


def branching() -> Topology:
    b = StreamBuilder("b")
    words = b.source("in").map(word)
    words.filter(lambda w: len(w) % 2 == 0).keyBy(key_of).count(queues=2).sink("out")
    words.filter(lambda w: len(w) % 2 == 1).map(to_sink).sink("late")
    merged = words.merge(b.source("other").map(word))
    merged.keyBy(lambda w: w).count(queues=3, name="all").sink("all")
    return b.build()


TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "count": counting,
    "aggregate": aggregating,
    "reduce": reducing,
    "tumbling-update": windowed(TumblingWindow(10, grace=3), "update"),
    "tumbling-close": windowed(TumblingWindow(10, grace=3), "close"),
    "hopping-update": windowed(HoppingWindow(10, 5, grace=2), "update"),
    "hopping-close": windowed(HoppingWindow(10, 5, grace=2), "close"),
    "session-update": windowed(SessionWindow(4, grace=2), "update"),
    "session-close": windowed(SessionWindow(4, grace=2), "close"),
    "join": joining("join"),
    "leftJoin": joining("leftJoin"),
    "outerJoin": joining("outerJoin"),
    "branch-merge": branching,
}

# Values: ordinary words, the ones the functions above fail on, and bytes that are no
# UTF-8 (the source's deserializer fails).
values = st.sampled_from(
    ["a", "ab", "abc", "b", "bc", "c", "boom", "set", "oops", "nojson", b"\xff\xfe"]
)
pipe = st.tuples(
    st.just("pipe"),
    st.sampled_from(["in", "other"]),
    st.none() | st.sampled_from(["k1", "k2", "k3"]),
    values,
    st.integers(min_value=0, max_value=60),
    st.sampled_from([(), (("trace", b"1"),)]),
)
ops = st.lists(
    pipe | st.tuples(st.just("advance"), st.integers(min_value=0, max_value=20)),
    min_size=4,
    max_size=40,
)


def play(
    driver_type: type[TopologyTestDriver],
    topology: Topology,
    script: list[tuple[Any, ...]],
    on_error: str,
    end: bool,
) -> dict[str, Any]:
    """Run ``script`` and return everything a test could see of it."""
    seen: dict[str, Any] = {"raised": []}

    def attempt(fn: Callable[[], Any]) -> Any:
        try:
            out = fn()
        except Exception as e:  # the same error, from the same call, is the point
            seen["raised"].append((type(e).__name__, str(e)))
            return None
        seen["raised"].append(None)
        return out

    driver = driver_type(topology, on_error=on_error, queues={"in": 2, "other": 1})
    for op in script:
        if op[0] == "advance":
            attempt(partial(driver.advance_time, op[1]))
        elif op[1] in topology.source_topics:
            _, topic, key, value, ts, headers = op
            attempt(partial(driver.pipe, topic, value, key=key, timestamp=ts, headers=headers))
        if len(seen["raised"]) % 7 == 0:  # read now and then, as tests do
            seen[f"read{len(seen['raised'])}"] = attempt(lambda: driver.read("out"))
    if end:
        attempt(driver.end_of_input)
    outputs = [t for t, spec in topology.topics.items() if spec.role == "sink"]
    for topic in [*outputs, dead_letter_topic(topology.job_id)]:
        seen[topic] = attempt(lambda topic=topic: driver.read(topic))
    for store in topology.stores:
        seen[store] = attempt(lambda store=store: driver.state(store))
    seen["metrics"] = driver.metrics
    attempt(driver.close)
    return seen


@pytest.mark.parametrize("kind", list(TOPOLOGIES))
@EXAMPLES
@given(
    script=ops,
    on_error=st.sampled_from(["fail", "skip", "dead-letter"]),
    end=st.booleans(),
)
def test_the_fast_driver_gives_what_one_record_at_a_time_gives(
    kind: str, script: list[tuple[Any, ...]], on_error: str, end: bool
) -> None:
    topology = TOPOLOGIES[kind]()
    expected = play(OneAtATimeDriver, topology, script, on_error, end)
    assert play(TopologyTestDriver, topology, script, on_error, end) == expected


def test_a_value_the_store_can_not_take_fails_the_pipe_that_made_it() -> None:
    """The commit is prepared after every pipe: its error is the pipe's, not a later
    call's (and the driver goes on, without the failed task)."""
    driver = TopologyTestDriver(aggregating())
    driver.pipe("in", "ab")
    with pytest.raises(Exception, match=r"for key 's'.*a set can not be stored"):
        driver.pipe("in", "set")
    driver.pipe("in", "abc")  # key 'a', another task than 's': fine
    assert driver.read_values("out") == ["2", "{1, 2}", "5"]
    # The failed task commits nothing more; its state still shows what it holds.
    assert driver.state("a-in-aggregate-2-store") == {"a": 5, "s": {1, 2}}
    driver.close()


def test_state_reads_changes_whose_commit_is_prepared_not_written() -> None:
    driver = TopologyTestDriver(counting())
    driver.pipe_all("in", ["ab", "ac", "b"])
    task = next(t for t in driver._engine.tasks if t.stores)
    assert driver._prepared, "the commit should be prepared, not written yet"
    assert driver.state("c-in-count-3-store") == {"a": 2, "b": 1}
    assert not driver._prepared and not any(s.pending for s in task.stores.values())
    driver.close()
