"""Property-based invariants (Hypothesis)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams import StreamBuilder
from rstreams.runtime.queues import MemoryBroker, queue_for_key
from rstreams.serde import get_serde
from rstreams.state import MemoryStore, store_stack
from rstreams.testing import TopologyTestDriver

MSGPACK = get_serde("msgpack")
FAST = settings(max_examples=50, deadline=None)

WORDCOUNT_STORE = "wc-lines-count-3-store"


def wordcount_topology():
    b = StreamBuilder("wc")
    (
        b.source("lines")
        .flatMap(lambda line: re.findall(r"\w+", line.lower()))
        .keyBy(lambda w: w)
        .count()
        .sink("counts")
    )
    return b.build()


WORDCOUNT = wordcount_topology()

lines_strategy = st.lists(st.text(alphabet="abcAB xyz .,;!?'-_\t0", max_size=40), max_size=12)


@FAST
@given(lines=lines_strategy, queues=st.sampled_from([1, 3]))
def test_driver_word_count_equals_counter(lines: list[str], queues: int) -> None:
    expected = Counter(w for line in lines for w in re.findall(r"\w+", line.lower()))
    with TopologyTestDriver(WORDCOUNT, queues={"lines": queues}) as driver:
        driver.pipe_all("lines", lines)
        out = driver.read("counts")
        state = driver.state(WORDCOUNT_STORE)
    assert {r.key: r.value for r in out} == expected
    assert state == expected
    assert len(out) == sum(expected.values())


@FAST
@given(key=st.binary(max_size=64), queues=st.integers(min_value=1, max_value=10_000))
def test_partitioner_in_range_and_deterministic(key: bytes, queues: int) -> None:
    q = queue_for_key(key, queues)
    assert 0 <= q < queues
    assert queue_for_key(bytes(key), queues) == q


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
hashable = st.recursive(scalars, lambda inner: st.tuples(inner, inner), max_leaves=4)
plain_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(hashable, inner, max_size=4)
    ),
    max_leaves=20,
)


def same_shape(a: Any, b: Any) -> bool:
    """Equal, and tuples stay tuples and lists stay lists all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_shape(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_shape(a[k], b[k]) for k in a)
    return a == b


@FAST
@given(value=plain_values)
def test_msgpack_round_trips_nested_plain_values(value: Any) -> None:
    assert same_shape(MSGPACK.deserialize(MSGPACK.serialize(value)), value)


# Values a store holds (msgpack ints are 64-bit), including falsy ones and tuples.
stored_values = (
    st.integers(-(2**63), 2**64 - 1) | st.text(max_size=3) | st.tuples(st.integers(0, 9))
)
keys = st.one_of(st.integers(min_value=0, max_value=6), st.sampled_from(["a", "b", ("t", 1)]))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, stored_values),
        st.tuples(st.just("delete"), keys),
        st.tuples(st.just("get"), keys),
        st.tuples(st.just("flush")),
    ),
    max_size=60,
)


@FAST
@given(ops=ops, max_entries=st.integers(min_value=1, max_value=5))
def test_changelog_replay_reproduces_the_store(ops: list[tuple], max_entries: int) -> None:
    broker = MemoryBroker()
    broker.create_topic("s-changelog", 1)
    inner = MemoryStore("s")
    store = store_stack(inner, MSGPACK, MSGPACK, "s-changelog", 0, broker, max_entries)
    commits = 0

    def commit() -> None:  # as a task commits: each commit's records carry its number
        nonlocal commits
        commits += 1
        store.flush(commits)
        store.send()
        store.write()

    model: dict[Any, Any] = {}
    for op, *args in ops:
        if op == "put":
            store.put(*args)
            model[args[0]] = args[1]
        elif op == "delete":
            store.delete(args[0])
            model.pop(args[0], None)
        elif op == "get":
            assert store.get(args[0]) == model.get(args[0])
        else:
            commit()
        if store.full:  # the task commits when a cache is full
            commit()
    commit()

    by_commit: dict[int, list[tuple[bytes, bytes | None]]] = {}
    for r in broker.read("s-changelog", 0, 0):
        assert r.key is not None
        by_commit.setdefault(r.timestamp, []).append((r.key, r.value))
    end = broker.end_offset("s-changelog", 0)
    assert store.changelog_offset == (end if end else None)  # the store's checkpoint
    replay: dict[bytes, bytes] = {}
    for batch in by_commit.values():
        assert len({k for k, _ in batch}) == len(batch)  # one entry per key per batch
        for k, v in batch:
            if v is None:
                replay.pop(k, None)
            else:
                replay[k] = v
    assert replay == dict(inner.items())
    assert {MSGPACK.deserialize(k): MSGPACK.deserialize(v) for k, v in replay.items()} == model
    assert dict(store.items()) == model
