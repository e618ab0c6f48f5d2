"""Store errors are not record errors; state that cannot be rebuilt stops the task."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgpack
import pytest

from rstreams import SerdeError, StreamBuilder, Topology
from rstreams.runtime.engine import EngineConfig, LocalEngine
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.engine.tasks.task import Task, transactions_topic
from rstreams.runtime.queues import MemoryBroker
from rstreams.state.metered import MeteredStore
from rstreams.state.stores import KeyValueStore, LostStateError, MemoryStore, StoreDamagedError
from rstreams.testing import TopologyTestDriver


def count_topology() -> Topology:
    b = StreamBuilder("c")
    b.source("in", queues=1).keyBy(lambda v: v).count(name="n", queues=1).sink("out")
    return b.build()


class DamagedStore(MemoryStore):
    """A store whose reads fail as a damaged RocksDB store's do."""

    def get(self, key: bytes) -> bytes | None:
        raise StoreDamagedError("checksum mismatch", store=self.name, path="/nowhere")

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        raise StoreDamagedError("checksum mismatch", store=self.name, path="/nowhere")


def put_under(stack: MeteredStore, store: KeyValueStore) -> None:
    """Make ``store`` the byte store under the layers of ``stack``."""
    stack.wrapped.wrapped.wrapped = store


@pytest.mark.parametrize("on_error", ["fail", "skip", "dead-letter"])
def test_a_store_that_cannot_be_read_is_not_a_record_error(on_error) -> None:
    with TopologyTestDriver(count_topology(), on_error=on_error) as driver:
        for task in driver._engine.tasks:
            for store in task.stores.values():
                put_under(store, DamagedStore(store.name))
        with pytest.raises(StoreDamagedError, match="checksum mismatch"):
            driver.pipe("in", "a")
        assert not driver.metrics.get("skipped") and not driver.metrics.get("dead_lettered")
        for task in driver._engine.tasks:
            for store in task.stores.values():
                put_under(store, MemoryStore(store.name))  # let the driver close


def test_a_value_the_store_cannot_write_stays_fatal_with_skip() -> None:
    b = StreamBuilder("sets")
    b.source("in").keyBy(len).aggregate(set, lambda acc, v: acc | {v}, name="uniq").sink(
        "out", serializer=lambda s: repr(sorted(s)).encode()
    )
    with (
        pytest.raises(
            SerdeError, match=r"step 'uniq' \(aggregate\) can not store its value for key 1"
        ),
        TopologyTestDriver(b.build(), on_error="skip") as driver,
    ):
        driver.pipe("in", "a")


def test_a_changelog_shorter_than_the_checkpoint_stops_the_restore(tmp_path: Path) -> None:
    topology = count_topology()
    config = EngineConfig(state="rocksdb", state_dir=str(tmp_path))
    broker = MemoryBroker()
    engine = LocalEngine(topology, broker, config)
    broker.append("in", 0, [(0, None, b"a", ()), (0, None, b"b", ())])
    engine.run_until_idle()
    engine.close()
    # The store's checkpoint says offset 2 of a changelog that now holds nothing.
    with pytest.raises(LostStateError) as e:
        LocalEngine(topology, MemoryBroker(), config)
    msg = str(e.value)
    assert "c-n-changelog[0]@0" in msg and "--fresh" in msg
    assert "docs/state.md#recovering-from-damage" in msg
    assert (e.value.topic, e.value.queue, e.value.offset, e.value.store) == (
        "c-n-changelog", 0, 0, "c-n-store",
    )  # fmt: skip
    # Nothing was cleared: the store still has what the lost records held.
    engine = LocalEngine(topology, broker, config)
    (store,) = [t.stores["c-n-store"].inner for t in engine.tasks if t.stores]
    assert store.meta("changelog_offset") == 2  # type: ignore[attr-defined]
    engine.close()


def test_a_queue_shorter_than_the_last_transaction_stops_the_recovery() -> None:
    topology = count_topology()
    broker = MemoryBroker()
    config = EngineConfig(guarantee="exactly-once")
    LocalEngine(topology, broker, config).close()  # creates the topics
    # The last transaction appended to out[0] when it held 5 records: it holds none.
    # (Written as a release before the transaction's "times" wrote it.)
    txn = {"task": "0_0", "seq": 1, "offsets": {"in": 1}, "appends": [["out", 0, 5, b"", 1, 0]]}
    broker.append(transactions_topic("c"), 0, [(0, None, msgpack.packb(txn), ())])
    with pytest.raises(LostStateError, match=r"out\[0\]@0.*--fresh") as e:
        Task(
            topology, topology.subtopologies[0], 0, broker, Producer(broker), config, "c",
            lambda: 0, txn_queue=0,
        )  # fmt: skip
    assert (e.value.topic, e.value.queue, e.value.offset) == ("out", 0, 0)


def test_a_task_rebuilds_a_damaged_store_from_its_changelog(tmp_path: Path, caplog) -> None:
    topology = count_topology()
    config = EngineConfig(state="rocksdb", state_dir=str(tmp_path), coalesce=True)
    broker = MemoryBroker()
    engine = LocalEngine(topology, broker, config)
    broker.append("in", 0, [(0, None, v.encode(), ()) for v in "abcab"])
    engine.run_until_idle()
    engine.close()
    for sst in tmp_path.glob("*/*/*.sst"):
        data = bytearray(sst.read_bytes())
        data[len(data) // 2] ^= 0xFF
        sst.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="rstreams.task"):
        engine = LocalEngine(topology, broker, config)
    assert "rebuilding it from its changelog" in caplog.text
    (task,) = [t for t in engine.tasks if t.stores]
    assert not task.failed
    broker.append("in", 0, [(0, None, b"a", ())])
    engine.run_until_idle()
    assert dict(task.stores["c-n-store"].items()) == {"a": 3, "b": 2, "c": 1}
    engine.close()


# -- an aggregate whose value can not be stored ---------------------------------------


def _set_of_users(windowed: bool) -> Topology:
    from rstreams import TumblingWindow

    b = StreamBuilder("views")
    grouped = b.source("v", "json").keyBy(lambda e: e["page"])
    agg = grouped.window(TumblingWindow(60000)) if windowed else grouped
    agg.aggregate(set, lambda acc, e: acc | {e["user"]}).toRStream().map(sorted).sink("out")
    return b.build()


@pytest.mark.parametrize("windowed", [True, False])
def test_an_aggregate_of_sets_names_step_key_window_and_type(windowed: bool) -> None:
    with (
        pytest.raises(SerdeError) as e,
        TopologyTestDriver(_set_of_users(windowed)) as driver,
    ):
        driver.pipe("v", {"page": "/product/42", "user": "ann"}, timestamp=61000)
    message = str(e.value)
    step = "v-windowAggregate-2" if windowed else "v-aggregate-2"
    assert f"step {step!r} (aggregate)" in message
    assert "key '/product/42'" in message
    assert ("window [60000, 120000)" in message) is windowed
    assert "a set can not be stored" in message
    assert "a list (sorted(...) for a stable order)" in message and "serde=" in message
    assert "('w'" not in message and "tuple" not in message.split("holds")[0]
