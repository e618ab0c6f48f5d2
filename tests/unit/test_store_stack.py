"""The store contract, run against every byte store, and the layers a task stacks on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rstreams import StreamBuilder
from rstreams.runtime.engine import EngineConfig, LocalEngine
from rstreams.runtime.engine.tasks.task import transactions_topic
from rstreams.runtime.engine.tasks.transaction import Transaction
from rstreams.runtime.queues import MemoryBroker
from rstreams.serde import INTERNAL_SERDE, get_serde
from rstreams.state import KeyValueStore, MemoryStore, MeteredStore, store_stack
from rstreams.state.rocksdb import RocksDBStore

MSGPACK = get_serde("msgpack")


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyValueStore]:
    s: KeyValueStore = (
        MemoryStore("s") if request.param == "memory" else RocksDBStore(tmp_path / "s", "s")
    )
    yield s
    s.close()


# -- the contract ---------------------------------------------------------------------------


def test_a_batch_and_its_changelog_offset_are_written_together(store: KeyValueStore) -> None:
    assert store.changelog_offset is None
    store.write_batch([(b"a", b"1"), (b"b", b"2")], offset=2)
    assert (list(store.items()), store.changelog_offset) == ([(b"a", b"1"), (b"b", b"2")], 2)
    store.write_columns([b"a", b"c"], [None, b"3"], offset=4)
    assert (list(store.items()), store.changelog_offset) == ([(b"b", b"2"), (b"c", b"3")], 4)
    store.write_batch([(b"d", b"4")])  # no offset: the checkpoint stays
    assert store.changelog_offset == 4 and store.get(b"d") == b"4"
    assert store.get_many([b"b", b"x", b"c"]) == [b"2", None, b"3"]
    assert [k for k, _ in store.range(b"b", b"d")] == [b"b", b"c"]


def test_clear_empties_data_and_checkpoint(store: KeyValueStore) -> None:
    store.write_batch([(b"a", b"1")], offset=1)
    store.clear()
    assert (list(store.items()), len(store), store.changelog_offset) == ([], 0, None)
    store.write_batch([(b"b", b"2")], offset=7)
    assert (list(store.items()), store.changelog_offset) == ([(b"b", b"2")], 7)


def test_estimate_counts_entries(store: KeyValueStore) -> None:
    store.write_batch([(bytes([i]), b"v" * 10) for i in range(50)], offset=50)
    store.flush()
    entries, size = store.estimate()
    assert entries == 50
    if isinstance(store, RocksDBStore):
        assert size is not None and size > 0
    else:
        assert size is None


def test_a_rocksdb_checkpoint_survives_a_reopen(tmp_path: Path) -> None:
    s = RocksDBStore(tmp_path / "s", "s")
    s.write_batch([(b"a", b"1")], offset=9)
    s.close()
    again = RocksDBStore(tmp_path / "s", "s")
    assert (again.get(b"a"), again.changelog_offset) == (b"1", 9)
    again.close()


# -- the layers ------------------------------------------------------------------------------


def stack(store: KeyValueStore, max_entries: int = 100) -> tuple[MeteredStore, MemoryBroker]:
    broker = MemoryBroker()
    broker.create_topic("s-changelog", 1)
    return store_stack(store, MSGPACK, MSGPACK, "s-changelog", 0, broker, max_entries), broker


def test_a_commit_logs_first_and_writes_the_store_with_the_changelog_end(
    store: KeyValueStore,
) -> None:
    s, broker = stack(store)
    broker.append("s-changelog", 0, [(0, b"x", b"y", ())])  # the changelog had a record
    s.put("a", 1)
    s.put("b", 2)
    assert s.flush(timestamp=7) == 2
    assert broker.end_offset("s-changelog", 0) == 1 and len(store) == 0  # nothing yet
    s.send()
    assert broker.end_offset("s-changelog", 0) == 3 and len(store) == 0  # logged only
    s.write()
    assert store.changelog_offset == 3
    assert dict(s.items()) == {"a": 1, "b": 2}
    logged = broker.read("s-changelog", 0, 1)
    assert {(r.timestamp, r.headers) for r in logged} == {(7, ())}
    assert {INTERNAL_SERDE.deserialize(r.key) for r in logged if r.key} == {"a", "b"}


def test_a_new_key_deleted_before_the_flush_leaves_no_changelog_record(
    store: KeyValueStore,
) -> None:
    # put_new: a join's waiting record, answered within the commit, costs nothing.
    s, broker = stack(store)
    s.put_new(("p", 1), "waits")
    s.put_new(("p", 2), "waits too")
    s.delete(("p", 1))
    assert s.get(("p", 1)) is None
    assert s.flush(timestamp=1) == 1
    s.send()
    s.write()
    assert broker.end_offset("s-changelog", 0) == 1 and dict(s.items()) == {("p", 2): "waits too"}
    # Once flushed it is in the store: its delete is logged (a tombstone), as any other.
    s.delete(("p", 2))
    assert s.flush(timestamp=2) == 1
    s.send()
    s.write()
    assert broker.end_offset("s-changelog", 0) == 2 and dict(s.items()) == {}


def test_metered_counts_a_batch_at_a_time(store: KeyValueStore) -> None:
    s, _ = stack(store)
    # The per-record methods are the cache's own: metering adds no call per record.
    assert s.get == s.wrapped.get and s.put == s.wrapped.put
    for i in range(5):
        s.put(i, i)
    s.put(0, 10)  # coalesced with the first write of key 0
    s.delete(4)
    s.flush(0)
    s.send()
    s.write()
    s.drop_clean()
    assert s.get_many([0, 1, 9]) == [10, 1, None]  # three keys read from the store
    assert s.get(2) == 2 and s.get(2) == 2  # one more; the second from the cache
    s.restore([INTERNAL_SERDE.serialize("r")], [MSGPACK.serialize(1)], offset=6)
    m = s.metrics()
    assert (m.puts, m.deletes, m.gets, m.restored) == (4, 1, 4, 1)
    # 0..3 and "r"; RocksDB's estimate also subtracts the tombstone of key 4
    assert m.entries == (5 if isinstance(store, MemoryStore) else 4)


def test_restore_writes_below_the_cache_and_sets_the_checkpoint(store: KeyValueStore) -> None:
    s, broker = stack(store)
    s.restore([INTERNAL_SERDE.serialize("a")], [MSGPACK.serialize(3)], offset=1)
    assert s.changelog_offset == 1 and s.get("a") == 3
    assert broker.end_offset("s-changelog", 0) == 0  # a restore is not logged again


# -- the stack in a task --------------------------------------------------------------------


def count_topology():
    b = StreamBuilder("c")
    b.source("in", queues=1).keyBy(lambda v: v).count(name="n", queues=1).sink("out")
    return b.build()


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_task_commits_through_its_stores(tmp_path: Path, guarantee: str) -> None:
    topology = count_topology()
    broker = MemoryBroker()
    config = EngineConfig(state="rocksdb", state_dir=str(tmp_path), guarantee=guarantee)
    engine = LocalEngine(topology, broker, config)
    broker.append("in", 0, [(0, None, v.encode(), ()) for v in "abca"])
    engine.run_until_idle()
    (task,) = [t for t in engine.tasks if t.stores]
    store = task.stores["c-n-store"]
    # The store is at the end of its changelog, which holds every update.
    assert store.changelog_offset == broker.end_offset("c-n-changelog", 0) > 0
    assert dict(store.items()) == {"a": 2, "b": 1, "c": 1}
    m = store.metrics()
    assert m.puts == broker.end_offset("c-n-changelog", 0) and m.deletes == 0
    if guarantee == "exactly-once":
        # The changelog records went through the transaction, marked with it.
        topic, q = transactions_topic("c"), task.txn_queue
        assert q is not None
        (last,) = broker.read(topic, q, broker.end_offset(topic, q) - 1)
        txn = Transaction.decode(last.value or b"")
        assert ("c-n-changelog", 0) in txn.written
        first = broker.read("c-n-changelog", 0, 0, 1)[0]
        assert first.headers[-1][0] == "rs.txn"
    engine.close()


def test_a_rocksdb_store_restores_only_the_changelog_tail(tmp_path: Path) -> None:
    topology = count_topology()
    broker = MemoryBroker()
    config = EngineConfig(state="rocksdb", state_dir=str(tmp_path))
    engine = LocalEngine(topology, broker, config)
    broker.append("in", 0, [(0, None, v.encode(), ()) for v in "abc"])
    engine.run_until_idle()
    engine.close()
    checkpoint = broker.end_offset("c-n-changelog", 0)
    # Two more changelog records the store has not seen (another owner wrote them).
    rows = [(0, INTERNAL_SERDE.serialize(k), MSGPACK.serialize(9), ()) for k in ("a", "d")]
    broker.append("c-n-changelog", 0, rows)
    engine = LocalEngine(topology, broker, config)
    (task,) = [t for t in engine.tasks if t.stores]
    assert task.restored == 2 and task.stores["c-n-store"].metrics().restored == 2
    assert task.stores["c-n-store"].changelog_offset == checkpoint + 2
    assert dict(task.stores["c-n-store"].items()) == {"a": 9, "b": 1, "c": 1, "d": 9}
    engine.close()
    # A memory store has nothing to resume from: the whole changelog is replayed.
    engine = LocalEngine(topology, broker, EngineConfig())
    (task,) = [t for t in engine.tasks if t.stores]
    assert task.restored == checkpoint + 2
    assert dict(task.stores["c-n-store"].items()) == {"a": 9, "b": 1, "c": 1, "d": 9}
    engine.close()
