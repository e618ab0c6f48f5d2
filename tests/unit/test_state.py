"""State: byte stores and the store stack (write-back cache, changelog) over them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rstreams import SerdeError
from rstreams.runtime.queues import MemoryBroker
from rstreams.serde import get_serde
from rstreams.state import KeyValueStore, MemoryStore, store_stack

MSGPACK = get_serde("msgpack")


class DictStore(KeyValueStore):
    """The least a store must implement; range/prefix/write_batch come from the base."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(sorted(self.data.items()))

    def __len__(self) -> int:
        return len(self.data)


@pytest.fixture(params=[MemoryStore, DictStore], ids=["memory", "base-class"])
def store(request: pytest.FixtureRequest) -> KeyValueStore:
    return request.param("s")


# -- byte stores ------------------------------------------------------------------------


def test_get_put_delete(store: KeyValueStore) -> None:
    assert store.get(b"a") is None
    store.put(b"a", b"1")
    store.put(b"a", b"2")
    assert store.get(b"a") == b"2"
    assert len(store) == 1
    store.delete(b"a")
    store.delete(b"never-there")  # deleting a missing key is fine
    assert store.get(b"a") is None
    assert len(store) == 0


def test_write_batch_applies_puts_and_tombstones(store: KeyValueStore) -> None:
    store.put(b"gone", b"x")
    store.write_batch([(b"b", b"2"), (b"a", b"1"), (b"gone", None), (b"c", None)])
    assert list(store.items()) == [(b"a", b"1"), (b"b", b"2")]


def test_items_are_in_key_order(store: KeyValueStore) -> None:
    for k in [b"b", b"\x00", b"ab", b"a", b"\xff"]:
        store.put(k, k)
    assert [k for k, _ in store.items()] == [b"\x00", b"a", b"ab", b"b", b"\xff"]


def test_range_is_start_inclusive_end_exclusive(store: KeyValueStore) -> None:
    store.write_batch([(bytes([c]), bytes([c])) for c in b"abcdef"])
    keys = lambda it: b"".join(k for k, _ in it)  # noqa: E731
    assert keys(store.range(b"b", b"e")) == b"bcd"
    assert keys(store.range(b"bb", b"dd")) == b"cd"
    assert keys(store.range(None, b"c")) == b"ab"
    assert keys(store.range(b"e")) == b"ef"
    assert keys(store.range()) == b"abcdef"
    assert keys(store.range(b"x", b"z")) == b""
    assert keys(store.range(b"d", b"b")) == b""


def test_prefix(store: KeyValueStore) -> None:
    for k in [b"user:1", b"user:2", b"usex", b"use", b"user", b"video:1"]:
        store.put(k, b"v")
    assert [k for k, _ in store.prefix(b"user")] == [b"user", b"user:1", b"user:2"]
    assert [k for k, _ in store.prefix(b"video:")] == [b"video:1"]
    assert list(store.prefix(b"zzz")) == []
    assert len(list(store.prefix(b""))) == 6


# -- the store stack: metered, caching, change-logging, bytes -----------------------------


class Stack:
    """A store stack over a MemoryStore, its changelog a MemoryBroker topic; commits as
    a task's commit does (flush, send, write), each with its number as the timestamp of
    its changelog records."""

    def __init__(self, max_entries: int = 100, inner: MemoryStore | None = None) -> None:
        self.broker = MemoryBroker()
        self.broker.create_topic("counts-changelog", 1)
        self.inner = inner if inner is not None else MemoryStore("counts")
        self.store = store_stack(
            self.inner, MSGPACK, MSGPACK, "counts-changelog", 0, self.broker, max_entries
        )
        self.commits = 0

    def commit(self) -> None:
        self.commits += 1
        if self.store.flush(self.commits):
            self.store.send()
            self.store.write()

    @property
    def batches(self) -> list[list[tuple[bytes, bytes | None]]]:
        """The changelog records of each commit that had changes, in order."""
        out: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for r in self.broker.read("counts-changelog", 0, 0):
            assert r.key is not None
            out.setdefault(r.timestamp, []).append((r.key, r.value))
        return list(out.values())

    def decoded(self, i: int) -> dict[object, object]:
        return {
            MSGPACK.deserialize(k): None if v is None else MSGPACK.deserialize(v)
            for k, v in self.batches[i]
        }


def test_writes_stay_in_the_cache_until_commit() -> None:
    st = Stack()
    s, inner = st.store, st.inner
    s.put("a", 1)
    s.put(("t", 2), [1, 2])
    assert s.get("a") == 1
    assert s.get(("t", 2)) == [1, 2]
    assert len(inner) == 0 and st.batches == []

    st.commit()
    assert dict(inner.items()) == {
        MSGPACK.serialize("a"): MSGPACK.serialize(1),
        MSGPACK.serialize(("t", 2)): MSGPACK.serialize([1, 2]),
    }
    assert st.decoded(0) == {"a": 1, ("t", 2): [1, 2]}


def test_commit_writes_only_what_changed_since_the_last_commit() -> None:
    st = Stack()
    s = st.store
    s.put("a", 1)
    s.put("b", 1)
    st.commit()
    s.get("a")  # a read is not a change
    s.put("b", 2)
    s.put("b", 3)  # several writes of one key: one changelog entry with the last value
    st.commit()
    st.commit()  # nothing dirty: no empty batch
    assert len(st.batches) == 2
    assert st.batches[1] == [(MSGPACK.serialize("b"), MSGPACK.serialize(3))]


def test_delete_writes_a_tombstone() -> None:
    st = Stack()
    s, inner = st.store, st.inner
    s.put("a", 1)
    s.put("b", 2)
    st.commit()
    s.delete("a")
    assert s.get("a") is None
    assert s.get("a", "default") == "default"
    st.commit()
    assert st.batches[1] == [(MSGPACK.serialize("a"), None)]
    assert dict(s.items()) == {"b": 2}
    assert len(inner) == 1


def test_falsy_values_are_values_not_missing() -> None:
    st = Stack()
    s = st.store
    for k, v in [("zero", 0), ("empty", ""), ("f", False), ("list", [])]:
        s.put(k, v)
    st.commit()
    s.drop_clean()  # read back from the store
    assert s.held == 0
    assert [s.get(k, "MISSING") for k in ("zero", "empty", "f", "list")] == [0, "", False, []]


def test_reads_fall_through_to_the_inner_store() -> None:
    inner = MemoryStore("pre")
    inner.put(MSGPACK.serialize("k"), MSGPACK.serialize((1, 2)))
    s = Stack(inner=inner).store
    assert s.get("k") == (1, 2)
    assert s.get("missing", 0) == 0


def test_a_full_cache_asks_for_a_commit_which_keeps_data_correct_and_memory_bounded() -> None:
    st = Stack(max_entries=3)
    s, inner = st.store, st.inner
    expected = {}
    for i in range(20):
        s.put(f"k{i % 7}", i)
        expected[f"k{i % 7}"] = i
        if s.full:  # what the task does (Task.wants_commit)
            st.commit()
        assert s.held <= 3
    # Read back everything, which also goes through the cache limit.
    for k, v in expected.items():
        assert s.get(k) == v
        if s.full:
            st.commit()
        assert s.held <= 3
    assert dict(s.items()) == expected
    assert len(s) == 7
    # Each commit wrote a batch: replaying the changelog gives the same content.
    replay: dict[bytes, bytes] = {}
    for batch in st.batches:
        for k, v in batch:
            if v is None:
                replay.pop(k, None)
            else:
                replay[k] = v
    assert replay == dict(inner.items())
    assert len(st.batches) > 1


def test_unstorable_value_names_the_store_and_key() -> None:
    st = Stack()
    s, inner = st.store, st.inner
    s.put("ok", 1)
    s.put("bad", {1, 2})
    with pytest.raises(
        SerdeError, match=r"store 'counts': can not store key 'bad': value of type set"
    ):
        st.commit()
    # Nothing half-written: neither the store nor the changelog saw the batch.
    assert len(inner) == 0 and st.batches == []


def test_corrupt_stored_value_names_the_store_and_key() -> None:
    inner = MemoryStore("st")
    inner.put(MSGPACK.serialize("k"), b"\xc1")
    s = Stack(inner=inner).store
    with pytest.raises(SerdeError, match=r"store 'st': can not read the value of key 'k'"):
        s.get("k")


def test_close_keeps_what_was_committed_and_drops_the_rest() -> None:
    st = Stack()
    s, inner = st.store, st.inner
    s.put("a", 1)
    st.commit()
    s.put("b", 2)  # never committed
    s.close()
    assert dict(inner.items()) == {MSGPACK.serialize("a"): MSGPACK.serialize(1)}
    assert len(st.batches) == 1
    with pytest.raises(ValueError, match="written only by its task's commit"):
        s.close(flush=True)


def test_process_cache_budget_bounds_memory_and_keeps_counts_exact() -> None:
    """Many more keys than the budget: what tasks hold stays under it after every batch
    (stored state is forgotten, then the biggest holders commit), counts stay exact."""
    from collections import Counter

    from rstreams import StreamBuilder
    from rstreams.runtime.engine.coordination.local import LocalEngine
    from rstreams.runtime.engine.operators.context import EngineConfig
    from rstreams.runtime.engine.tasks.task import relieve_memory

    b = StreamBuilder("budget")
    b.source("in", queues=2).flatMap(str.split).keyBy(lambda w: w).count(queues=2).sink("out")
    budget = 300
    engine = LocalEngine(
        b.build(), config=EngineConfig(coalesce=True, combine=True, cache_entries=budget)
    )
    words = [f"w{i % 2_000}" for i in range(20_000)]
    for i in range(0, len(words), 1_000):
        engine.producer.send_many(
            "in", (i // 1_000) % 2, [(0, None, " ".join(words[i : i + 1_000]).encode(), ())]
        )
    engine.producer.flush()
    most = 0
    while n := sum(t.poll(1) for t in engine.tasks):
        engine.producer.flush()
        relieve_memory(engine.tasks, budget)
        most = max(most, sum(t.held() for t in engine.tasks))
        assert n
    engine.commit()
    engine.run_until_idle()
    assert most <= budget
    assert sum(t.held() for t in engine.tasks) <= budget
    table = {}
    for q in range(engine.queue_counts["out"]):
        for r in engine.broker.read("out", q, 0):
            table[r.key] = r.value
    assert {k.decode().strip('"'): int(v) for k, v in table.items()} == Counter(words)
