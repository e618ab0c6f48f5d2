"""Pulling agents and the queue cache: bounded, cursor-based, never dropping records."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.runtime.engine.io.agent import AgentPool, PullingAgent, QueueCache
from rstreams.runtime.queues.base import LogRecord
from rstreams.runtime.queues.memory import MemoryBroker


def _broker(n: int, topic: str = "t") -> MemoryBroker:
    b = MemoryBroker()
    b.create_topic(topic, 1)
    b.append(topic, 0, [(i, None, str(i).encode(), ()) for i in range(n)])
    return b


def test_cache_is_bounded_and_agent_waits_for_room() -> None:
    broker = _broker(100)
    cache = QueueCache(capacity=10, start=0, consumers=["slow"])
    agent = PullingAgent(broker, "t", 0, cache, batch=4, pull_interval=0)
    pulled = sum(agent.pull(float(i)) for i in range(20))
    assert pulled == 10 and len(cache) == 10 and cache.room() == 0
    assert agent.pull(100.0) == 0  # full: backpressure, nothing read, nothing dropped
    assert list(cache.take("slow", 3).offsets) == [0, 1, 2]
    assert cache.room() == 3
    assert agent.pull(101.0) == 3
    # Everything arrives exactly once and in order, however slowly it is consumed.
    seen = [0, 1, 2]
    for i in range(200):
        agent.pull(200.0 + i)
        seen += cache.take("slow", 2).offsets
    assert seen == list(range(100))


def test_purge_waits_for_every_cursor() -> None:
    cache = QueueCache(capacity=5, start=0, consumers=["fast", "slow"])
    cache.add([LogRecord(i, 0, None, b"") for i in range(5)])
    assert len(cache.take("fast", 5)) == 5
    assert cache.room() == 0  # slow has read nothing
    assert list(cache.take("slow", 2).offsets) == [0, 1]
    assert cache.room() == 2
    assert len(cache.take("fast", 5)) == 0


def test_cache_refuses_overflow_and_bad_capacity() -> None:
    with pytest.raises(ValueError, match="capacity"):
        QueueCache(capacity=0, start=0, consumers=["a"])
    cache = QueueCache(capacity=1, start=0, consumers=["a"])
    with pytest.raises(OverflowError):
        cache.add([LogRecord(0, 0, None, b""), LogRecord(1, 0, None, b"")])


def test_cache_skips_offset_gaps_of_compacted_topics() -> None:
    cache = QueueCache(capacity=10, start=0, consumers=["a"])
    cache.add([LogRecord(o, 0, None, b"") for o in (0, 3, 4, 9)])
    assert list(cache.take("a", 1).offsets) == [0]
    assert list(cache.take("a", 10).offsets) == [3, 4, 9]


def test_agent_timer_and_immediate_repull() -> None:
    broker = _broker(10)
    cache = QueueCache(capacity=100, start=0, consumers=["a"])
    agent = PullingAgent(broker, "t", 0, cache, batch=4, pull_interval=1.0)
    assert agent.pull(0.0) == 4  # full pull: data keeps coming, due again at once
    assert agent.pull(0.0) == 4
    assert agent.pull(0.0) == 2  # short pull: wait for the timer
    broker.append("t", 0, [(0, None, b"x", ())])
    assert agent.pull(0.5) == 0
    assert agent.pull(1.0) == 1


def test_agent_pool_thread_delivers_everything() -> None:
    broker = _broker(5000)
    cache = QueueCache(capacity=64, start=0, consumers=["a"])
    pool = AgentPool(idle_sleep=0.001)
    pool.add(PullingAgent(broker, "t", 0, cache, batch=50, pull_interval=0.001))
    pool.start()
    got: list[int] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < 5000 and time.monotonic() < deadline:
            got += cache.take("a", 7).offsets
            assert len(cache) <= 64
    finally:
        pool.stop()
    assert got == list(range(5000))
    assert pool.error is None


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(0, 300),
    capacity=st.integers(1, 40),
    batch=st.integers(1, 50),
    takes=st.lists(st.integers(1, 30), min_size=1, max_size=20),
)
def test_property_consumed_equals_produced_in_order(n, capacity, batch, takes) -> None:
    broker = _broker(n)
    cache = QueueCache(capacity=capacity, start=0, consumers=["a"])
    agent = PullingAgent(broker, "t", 0, cache, batch=batch, pull_interval=0)
    got: list[bytes | None] = []
    i = 0
    while len(got) < n:
        agent.pull(float(i))
        got += cache.take("a", takes[i % len(takes)]).values
        assert len(cache) <= capacity
        i += 1
    assert got == [str(k).encode() for k in range(n)]
