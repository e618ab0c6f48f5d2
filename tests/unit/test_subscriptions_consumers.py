"""The consumer API: exclusive, shared, failover and key_shared subscriptions over a broker."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.errors import ConfigError, RStreamsError
from rstreams.runtime.queues import FileBroker, MemoryBroker
from rstreams.runtime.queues.base import queue_for_key
from rstreams.runtime.subscriptions import (
    AutoSplitHashRangeSelector,
    Consumer,
    ConsumerAssignError,
    ConsumerBusyError,
    ConsumerClosedError,
    KeyBasedBatcher,
    KeyBasedBatchProducer,
    Message,
    Subscription,
    failover_active_consumer,
    range_slot,
)


def make_broker(queues: int = 1, messages: int = 0, keys: int = 3) -> MemoryBroker:
    broker = MemoryBroker()
    broker.create_topic("t", queues)
    produce(broker, messages, keys, queues)
    return broker


def produce(broker, n: int, keys: int = 3, queues: int = 1, start: int = 0) -> None:
    for i in range(start, start + n):
        broker.append("t", i % queues, [(i, f"k{i % keys}".encode(), f"v{i}".encode(), ())])


def offsets(messages: list[Message]) -> list[int]:
    return [m.offset for m in messages]


# -- basics ------------------------------------------------------------------------------------


def test_configuration_errors() -> None:
    broker = make_broker()
    with pytest.raises(ConfigError, match="topic 'nope' does not exist"):
        Subscription(broker, "nope", "s")
    with pytest.raises(ConfigError, match="unknown subscription_type 'fanout'"):
        Subscription(broker, "t", "s", "fanout")
    with pytest.raises(ConfigError, match="unknown key_shared_selector 'random'"):
        Subscription(broker, "t", "s", "key_shared", key_shared_selector="random")
    sub = Subscription(broker, "t", "s", "Key_Shared")  # Pulsar's spelling works too
    assert sub.type.value == "key_shared"
    with pytest.raises(ConfigError, match="hash_ranges is only for"):
        sub.subscribe("a", hash_ranges=[(0, 10)])
    with pytest.raises(ConfigError, match="no single active consumer"):
        sub.active_consumer(0)


def test_exclusive_second_consumer_is_refused() -> None:
    broker = make_broker(messages=5)
    sub = Subscription(broker, "t", "s")
    a = sub.subscribe("a")
    with pytest.raises(ConsumerBusyError, match="exclusive and consumer 'a' is connected") as e:
        sub.subscribe("b")
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, RStreamsError)
    got = a.receive(3)
    assert offsets(got) == [0, 1, 2]
    a.ack(got[0])
    a.close()
    b = sub.subscribe("b")  # the seat is free again; unacknowledged messages come back
    again = b.receive(10)
    assert [(m.offset, m.redelivery_count) for m in again] == [(1, 1), (2, 1), (3, 0), (4, 0)]
    with pytest.raises(ConsumerClosedError):
        a.receive()


def test_cursor_is_the_brokers_committed_offset(tmp_path) -> None:
    with FileBroker(tmp_path) as broker:
        broker.create_topic("t", 2)
        produce(broker, 10, queues=2)
        sub = Subscription(broker, "t", "billing", "shared")
        c = sub.subscribe("c")
        got = c.receive(10)
        assert sorted((m.queue, m.offset) for m in got) == [
            (q, o) for q in (0, 1) for o in range(5)
        ]
        c.ack([m for m in got if m.queue == 0])
        c.ack([(1, 0), (1, 1), (1, 3)])  # (1, 2) stays unacknowledged
        assert sub.committed() == {0: 5, 1: 2}
        assert broker.committed("billing", "t", 0) == 5
        assert broker.committed("billing", "t", 1) == 2
        sub.close()
    with FileBroker(tmp_path) as broker:  # a restart resumes from the committed offsets
        c = Subscription(broker, "t", "billing", "shared").subscribe("c")
        # Individual acks above the committed offset are not persisted: 1:3 comes again.
        assert sorted(m.id for m in c.receive(10)) == [(1, 2), (1, 3), (1, 4)]


def test_ack_rules() -> None:
    broker = make_broker(messages=3)
    sub = Subscription(broker, "t", "s", "shared")
    c = sub.subscribe("c")
    [m] = c.receive()
    with pytest.raises(ValueError, match="never delivered"):
        c.ack((0, 2))
    with pytest.raises(ConfigError, match="cumulative acknowledgement is not supported on shared"):
        c.ack_cumulative(m)
    c.ack(m)
    c.ack(m)  # twice: nothing happens
    assert sub.committed() == {0: 1}
    [m1] = c.receive()
    c.negative_acknowledge(m1)
    [again] = c.receive()
    assert again.id == m1.id and again.redelivery_count == 1


def test_cumulative_ack_on_exclusive() -> None:
    sub = Subscription(make_broker(messages=6), "t", "s")
    c = sub.subscribe("c")
    got = c.receive(5)
    c.ack_cumulative(got[3])
    assert sub.committed() == {0: 4}


def test_receive_waits_for_new_messages() -> None:
    broker = make_broker()
    c = Subscription(broker, "t", "s").subscribe("c")
    t0 = time.monotonic()
    assert c.receive(timeout=0.05) == []
    assert time.monotonic() - t0 >= 0.04
    threading.Timer(0.05, produce, args=(broker, 1)).start()
    assert offsets(c.receive(timeout=5)) == [0]


# -- shared ------------------------------------------------------------------------------------


def test_shared_round_robin_and_redelivery_on_leave() -> None:
    sub = Subscription(make_broker(messages=10), "t", "s", "shared")
    a, b = sub.subscribe("a"), sub.subscribe("b")
    got_a = a.receive(5)
    assert offsets(got_a) == [0, 2, 4, 6, 8]
    got_b = b.receive(2)
    assert offsets(got_b) == [1, 3]
    b.ack(got_b[0])
    b.close()  # 3 received-unacked, 5 7 9 dispatched to b but never received
    rest = a.receive(10)
    assert [(m.offset, m.redelivery_count) for m in rest] == [(3, 1), (5, 0), (7, 0), (9, 0)]


def test_shared_priority_levels() -> None:
    sub = Subscription(make_broker(messages=6), "t", "s", "shared", receiver_queue_size=2)
    low = sub.subscribe("low", priority=1)
    high = sub.subscribe("high", priority=0)
    # high gets messages while it has room (2), then low.
    assert offsets(low.receive(4)) == [2, 3, 4, 5]
    assert offsets(high.receive(4)) == [0, 1]


# -- failover ----------------------------------------------------------------------------------


def test_failover_active_per_queue_and_takeover() -> None:
    broker = make_broker(queues=3, messages=12)
    sub = Subscription(broker, "t", "s", "failover")
    cs = {n: sub.subscribe(n) for n in ["c2", "c1"]}
    standby = sub.subscribe("backup", priority=1)
    pairs = [(c.name, c.priority) for c in sub.consumers]
    for q in range(3):
        assert sub.active_consumer(q).name == failover_active_consumer(q, pairs)
    assert [sub.active_consumer(q).name for q in range(3)] == ["c1", "c2", "c1"]
    got = {n: c.receive(20) for n, c in cs.items()}
    assert {m.queue for m in got["c1"]} == {0, 2} and {m.queue for m in got["c2"]} == {1}
    assert standby.receive(10) == []
    cs["c1"].ack([m for m in got["c1"] if m.offset < 2])
    cs["c1"].close()  # c2 takes queues 0 and 2 (the only top-priority consumer left)
    assert [sub.active_consumer(q).name for q in range(3)] == ["c2"] * 3
    moved = cs["c2"].receive(20)
    assert sorted(m.id for m in moved) == [(0, 2), (0, 3), (2, 2), (2, 3)]
    assert all(m.redelivery_count == 1 for m in moved)
    for q in (0, 2):  # each queue's messages still come in order
        assert [m.offset for m in moved if m.queue == q] == [2, 3]
    cs["c2"].close()
    assert [sub.active_consumer(q).name for q in range(3)] == ["backup"] * 3
    assert sorted(m.id for m in standby.receive(20)) == sorted(
        [(0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), (2, 2), (2, 3)]
    )


def test_failover_higher_priority_consumer_takes_over() -> None:
    sub = Subscription(make_broker(messages=4), "t", "s", "failover")
    low = sub.subscribe("low", priority=5)
    got = low.receive(2)
    assert offsets(got) == [0, 1]
    high = sub.subscribe("high", priority=0)
    assert sub.active_consumer(0) is high
    assert low.receive(5) == []
    # Like Pulsar's cursor rewind, the new active consumer starts at the first unacked.
    assert offsets(high.receive(5)) == [0, 1, 2, 3]


# -- key_shared --------------------------------------------------------------------------------


@pytest.mark.parametrize("selector", ["consistent_hashing", "auto_split"])
def test_key_shared_keys_stick_to_one_consumer(selector: str) -> None:
    sub = Subscription(
        make_broker(queues=2, messages=60, keys=10),
        "t",
        "s",
        "key_shared",
        key_shared_selector=selector,
    )
    cs = [sub.subscribe(f"c{i}") for i in range(3)]
    owner: dict[bytes, str] = {}
    seen: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    for _ in range(20):
        for c in cs:
            for m in c.receive(7):
                assert owner.setdefault(m.key, c.name) == c.name
                seen[(m.queue, m.key)].append(m.offset)
                assert m.key is not None and sub.selector.select(m.key) is c
                c.ack(m)
    assert sum(len(v) for v in seen.values()) == 60
    assert all(v == sorted(v) for v in seen.values())


def test_key_shared_ordering_guarantee_on_join() -> None:
    broker = make_broker(messages=40, keys=5)
    sub = Subscription(broker, "t", "s", "key_shared", key_shared_selector="auto_split")
    c1 = sub.subscribe("c1")
    first = c1.receive(10)  # offsets 0..9, all keys, not acknowledged yet
    assert offsets(first) == list(range(10))
    c2 = sub.subscribe("c2")  # joins with the read position at 10
    moved_keys = {m.key for m in first if sub.selector.select(m.key) is c2}
    assert moved_keys  # some keys moved to c2
    # c2 gets nothing while messages dispatched before it joined are unacknowledged...
    assert c2.receive(100) == []
    # ...while c1 keeps the keys it still owns.
    more = c1.receive(100)
    assert more and all(m.key not in moved_keys for m in more)
    c1.ack(first[:9])
    assert c2.receive(100) == []  # one message of before the join is still pending
    c1.ack(first[9])
    after = c2.receive(100)
    assert after and {m.key for m in after} == moved_keys
    assert offsets(after) == sorted(offsets(after)) and min(offsets(after)) >= 10


def test_key_shared_out_of_order_delivery_allowed() -> None:
    broker = make_broker(messages=40, keys=5)
    sub = Subscription(
        broker,
        "t",
        "s",
        "key_shared",
        key_shared_selector="auto_split",
        allow_out_of_order_delivery=True,
    )
    c1 = sub.subscribe("c1")
    c1.receive(10)
    c2 = sub.subscribe("c2")
    assert c2.receive(100)  # at once, although c1 has not acknowledged anything


def test_key_shared_leaving_consumer_returns_its_keys_in_order() -> None:
    sub = Subscription(make_broker(messages=30, keys=6), "t", "s", "key_shared")
    c1, c2 = sub.subscribe("c1"), sub.subscribe("c2")
    got1 = c1.receive(100)
    c2.receive(100)
    c1.close()
    again = c2.receive(100)
    assert [(m.offset, m.redelivery_count) for m in again] == [(m.offset, 1) for m in got1]


def test_key_shared_sticky_ranges_hold_uncovered_keys() -> None:
    broker = make_broker(messages=20, keys=20)
    sub = Subscription(broker, "t", "s", "key_shared", key_shared_selector="sticky")
    with pytest.raises(ConsumerAssignError, match="must give its hash ranges"):
        sub.subscribe("x")
    low = sub.subscribe("low", hash_ranges=[(0, 32767)])
    assert low.ranges() == [(0, 32767)]
    got = low.receive(100)
    assert all(range_slot(m.key) <= 32767 for m in got)
    held = {o for o in range(20)} - set(offsets(got))
    assert held  # keys in the gap wait for someone to cover them
    high = sub.subscribe("high", hash_ranges=[(32768, 65535)])
    assert set(offsets(high.receive(100))) == held
    with pytest.raises(ConsumerAssignError, match="overlaps"):
        sub.subscribe("greedy", hash_ranges=[(100, 200)])


def test_key_shared_selector_object_and_no_key() -> None:
    broker = make_broker()
    broker.append("t", 0, [(0, None, b"a", ()), (1, None, b"b", ())])
    sub = Subscription(
        broker, "t", "s", "key_shared", key_shared_selector=AutoSplitHashRangeSelector
    )
    a, b = sub.subscribe("a"), sub.subscribe("b")
    # Messages without a key all share Pulsar's "NONE_KEY" sticky key: one consumer.
    got = {c.name: [m.value for m in c.receive(5)] for c in (a, b)}
    assert sorted(got.values()) == [[], [b"a", b"b"]]


class Model:
    """What consumers hold, from the outside: received and not yet acknowledged."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self.held: dict[Consumer, list[Message]] = {}
        self.delivered: dict[tuple[int, bytes], list[int]] = defaultdict(list)
        self.acked: set[tuple[int, int]] = set()

    def received(self, consumer: Consumer, messages: list[Message]) -> None:
        for m in messages:
            for other, held in self.held.items():
                if other is not consumer:
                    # No one else holds an unacknowledged message of this key.
                    assert all(h.key != m.key or h.queue != m.queue for h in held), (m, other)
            # Every earlier message of the key is acknowledged or held by this consumer.
            mine = {h.id for h in self.held.get(consumer, [])}
            for r in self.broker.read("t", m.queue, 0):
                if r.key == m.key and r.offset < m.offset:
                    assert (m.queue, r.offset) in self.acked | mine, (m, r)
            self.delivered[(m.queue, m.key)].append(m.offset)
            self.held.setdefault(consumer, []).append(m)


@pytest.mark.parametrize("selector", ["auto_split", "consistent_hashing"])
@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["join", "leave", "receive", "ack", "produce"]), st.integers(0, 5)
        ),
        max_size=40,
    )
)
def test_key_shared_keeps_key_order_under_churn(selector: str, ops) -> None:
    broker = make_broker(queues=2, messages=20, keys=4)
    produced = 20
    sub = Subscription(
        broker,
        "t",
        "s",
        "key_shared",
        key_shared_selector=selector,
        receiver_queue_size=3,
        max_look_ahead=6,
        read_batch=4,
    )
    model = Model(broker)
    live: list[Consumer] = []
    names = iter(f"c{i}" for i in range(1000))
    for op, n in ops:
        if op == "join" or not live:
            c = sub.subscribe(next(names))
            live.append(c)
            model.held[c] = []
            continue
        c = live[n % len(live)]
        if op == "leave":
            c.close()
            live.remove(c)
            del model.held[c]
        elif op == "receive":
            model.received(c, c.receive(n + 1))
        elif op == "ack":  # acknowledge the oldest held messages (in order)
            done, model.held[c] = model.held[c][: n + 1], model.held[c][n + 1 :]
            c.ack(done)
            model.acked.update(m.id for m in done)
        else:
            produce(broker, n + 1, keys=4, queues=2, start=produced)
            produced += n + 1
    # Drain: one consumer left ends up with everything, and the cursor reaches the end.
    for c in live:
        done = model.held.pop(c)
        c.ack(done)
        model.acked.update(m.id for m in done)
        c.close()
    last = sub.subscribe("last")
    model.held[last] = []
    while batch := last.receive(50):
        model.received(last, batch)
        last.ack(batch)
        model.acked.update(m.id for m in batch)
    assert len(model.acked) == produced
    assert sub.committed() == {0: broker.end_offset("t", 0), 1: broker.end_offset("t", 1)}


# -- key-based batching ------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    msgs=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", None]), st.binary(max_size=8)), max_size=60
    ),
    max_messages=st.integers(1, 5),
    max_bytes=st.integers(1, 30),
)
def test_batches_never_mix_keys(msgs, max_messages: int, max_bytes: int) -> None:
    batcher = KeyBasedBatcher(3, max_messages=max_messages, max_bytes=max_bytes)
    batches = []
    for key, value in msgs:
        batches += batcher.add(key, value, timestamp=0)
    batches += batcher.drain()
    assert len(batcher) == 0
    per_key: dict[bytes | None, list[bytes | None]] = defaultdict(list)
    for batch in batches:
        assert 1 <= len(batch.records) <= max_messages
        assert {r[1] for r in batch.records} == {batch.key}  # one key per batch
        if batch.key is not None:
            assert batch.queue == queue_for_key(batch.key, 3)
        per_key[batch.key] += [r[2] for r in batch.records]
    for key in {k for k, _ in msgs}:
        kb = key.encode() if key else None
        assert per_key[kb] == [v for k, v in msgs if k == key]  # each key keeps its order


def test_key_based_batch_producer_appends_one_batch_per_key() -> None:
    broker = MemoryBroker()
    broker.create_topic("t", 2)
    with KeyBasedBatchProducer(broker, "t", max_messages=2) as p:
        for i in range(5):
            p.send(f"v{i}", key="k")
        p.send("x", key="other")
    assert [len(batch.records) for batch, _ in p.sent if batch.key == b"k"] == [2, 2, 1]
    q = queue_for_key(b"k", 2)
    assert [r.value for r in broker.read("t", q, 0) if r.key == b"k"] == [
        f"v{i}".encode() for i in range(5)
    ]
    with pytest.raises(ConfigError, match="does not exist"):
        KeyBasedBatchProducer(broker, "nope")
