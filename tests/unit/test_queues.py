"""The in-memory broker and the key partitioner."""

from __future__ import annotations

import pytest

from rstreams import ConfigError
from rstreams.runtime.queues import MemoryBroker, queue_for_key


def rec(value: bytes, ts: int = 0, key: bytes | None = None) -> tuple:
    return (ts, key, value, ())


@pytest.fixture
def broker() -> MemoryBroker:
    b = MemoryBroker()
    b.create_topic("t", 2)
    return b


def test_offsets_are_dense_per_queue(broker: MemoryBroker) -> None:
    assert broker.append("t", 0, [rec(b"a"), rec(b"b")]) == 0
    assert broker.append("t", 1, [rec(b"x")]) == 0
    assert broker.append("t", 0, [rec(b"c")]) == 2
    assert [r.offset for r in broker.read("t", 0, 0)] == [0, 1, 2]
    assert [r.value for r in broker.read("t", 0, 1)] == [b"b", b"c"]
    assert [r.value for r in broker.read("t", 0, 0, max_records=2)] == [b"a", b"b"]
    assert broker.read("t", 0, 3) == []
    assert broker.end_offset("t", 0) == 3
    assert broker.end_offset("t", 1) == 1


def test_records_keep_key_timestamp_and_headers(broker: MemoryBroker) -> None:
    broker.append("t", 1, [(42, b"k", b"v", (("h", b"1"),))])
    (r,) = broker.read("t", 1, 0)
    assert (r.offset, r.timestamp, r.key, r.value, r.headers) == (0, 42, b"k", b"v", (("h", b"1"),))


def test_append_of_nothing_returns_the_end(broker: MemoryBroker) -> None:
    broker.append("t", 0, [rec(b"a")])
    assert broker.append("t", 0, []) == 1
    assert broker.end_offset("t", 0) == 1


def test_purge_drops_old_records_and_keeps_offsets(broker: MemoryBroker) -> None:
    broker.append("t", 0, [rec(bytes([c])) for c in b"abcde"])
    broker.purge("t", 0, 3)
    assert broker.start_offset("t", 0) == 3
    assert broker.end_offset("t", 0) == 5
    assert [(r.offset, r.value) for r in broker.read("t", 0, 3)] == [(3, b"d"), (4, b"e")]
    assert broker.append("t", 0, [rec(b"f")]) == 5
    broker.purge("t", 0, 2)  # already purged: no-op
    assert broker.start_offset("t", 0) == 3
    broker.purge("t", 0, 100)  # past the end: purges what exists, never beyond
    assert broker.start_offset("t", 0) == 6
    assert broker.read("t", 0, 6) == []
    assert broker.append("t", 0, [rec(b"g")]) == 6


def test_reading_a_purged_offset_is_an_error(broker: MemoryBroker) -> None:
    broker.append("t", 0, [rec(b"a"), rec(b"b")])
    broker.purge("t", 0, 1)
    with pytest.raises(ConfigError, match=r"offset 0 of t\[0\] was purged; the queue starts at 1"):
        broker.read("t", 0, 0)


def test_topics_and_queues_must_exist(broker: MemoryBroker) -> None:
    with pytest.raises(ConfigError, match="topic 'nope' does not exist"):
        broker.read("nope", 0, 0)
    with pytest.raises(ConfigError, match="topic 't' has no queue 2 \\(it has 2\\)"):
        broker.append("t", 2, [rec(b"a")])
    assert broker.queue_count("t") == 2
    assert broker.queue_count("nope") is None


def test_create_topic_is_idempotent_but_checks_the_count(broker: MemoryBroker) -> None:
    broker.append("t", 0, [rec(b"a")])
    broker.create_topic("t", 2)
    assert broker.end_offset("t", 0) == 1  # not recreated
    with pytest.raises(ConfigError, match="topic 't' exists with 2 queues; asked for 3"):
        broker.create_topic("t", 3)
    with pytest.raises(ConfigError, match="needs at least one queue; got 0"):
        broker.create_topic("empty", 0)


def test_committed_offsets_are_per_group_topic_queue(broker: MemoryBroker) -> None:
    assert broker.committed("g", "t", 0) == 0
    broker.commit("g", "t", 0, 5)
    broker.commit("h", "t", 0, 2)
    assert broker.committed("g", "t", 0) == 5
    assert broker.committed("h", "t", 0) == 2
    assert broker.committed("g", "t", 1) == 0


# -- partitioner ------------------------------------------------------------------------


def test_queue_for_key_is_murmur3_unsigned_modulo() -> None:
    # Murmur3 x86 32-bit, seed 0, of b"hello" is 0x248BFA47 (the reference test vector).
    assert queue_for_key(b"hello", 2**32) == 0x248BFA47
    assert queue_for_key(b"hello", 8) == 0x248BFA47 % 8
    assert queue_for_key(b"", 2**32) == 0


@pytest.mark.parametrize("queues", [1, 2, 3, 8, 1000])
def test_queue_for_key_is_in_range_and_deterministic(queues: int) -> None:
    keys = [f"key-{i}".encode() for i in range(500)]
    first = [queue_for_key(k, queues) for k in keys]
    assert first == [queue_for_key(k, queues) for k in keys]
    assert all(0 <= q < queues for q in first)
    if queues <= 8:
        assert set(first) == set(range(queues))  # 500 keys reach every queue
