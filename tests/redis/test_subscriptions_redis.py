"""A subscription whose state is in Redis behaves exactly as the in-process one.

The same random sequence of joins, receives, acks, negative acks and leaves runs on one
in-process Subscription and on Redis-backed Subscriptions, one object per consumer (as
if each consumer were in its own process); every answer must be the same.
"""

from __future__ import annotations

import random
import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from rstreams.errors import ConfigError
from rstreams.runtime.queues import MemoryBroker
from rstreams.runtime.subscriptions import ConsumerClosedError, Subscription

KINDS = [
    ("exclusive", "consistent_hashing"),
    ("shared", "consistent_hashing"),
    ("failover", "consistent_hashing"),
    ("key_shared", "consistent_hashing"),
    ("key_shared", "auto_split"),
    ("key_shared", "sticky"),
]


def broker_with(queues: int = 3, count: int = 90) -> MemoryBroker:
    broker = MemoryBroker()
    broker.create_topic("orders", queues)
    for q in range(queues):
        rows = [(i, b"k%d" % (i % 7), b"v%d" % i, ()) for i in range(q, count, queues)]
        broker.append("orders", q, rows)
    return broker


class Model:
    """Runs operations on consumers; ``open_sub(name)`` gives the Subscription a new
    consumer joins through."""

    def __init__(self, open_sub: Any, kind: str) -> None:
        self.open_sub = open_sub
        self.kind = kind
        self.consumers: dict[str, Any] = {}
        self.held: dict[str, list[tuple[int, int]]] = {}

    def step(self, rng: random.Random, n: int) -> Any:
        live = sorted(self.consumers)
        op = rng.choice(["join", "receive", "receive", "receive", "ack", "nack", "close"])
        if op == "join" or not live:
            name = f"c{n}"
            ranges = [(q * 16384, q * 16384 + 16383) for q in [n % 4]]
            try:
                consumer = self.open_sub(name).subscribe(
                    name,
                    rng.choice([0, 0, 1]),
                    hash_ranges=ranges if self.kind == "sticky" else None,
                )
            except (ConfigError, RuntimeError, ValueError) as e:
                return ("join", type(e).__name__)
            self.consumers[name] = consumer
            return ("join", name)
        name = rng.choice(live)
        consumer = self.consumers[name]
        if op == "receive":
            got = consumer.receive(rng.randint(1, 6))
            self.held.setdefault(name, []).extend(m.id for m in got)
            return ("receive", name, [(m.id, m.value, m.redelivery_count) for m in got])
        mine = self.held.get(name, [])
        some = [m for m in mine if rng.random() < 0.6]
        self.held[name] = [m for m in mine if m not in some]
        if op == "ack":
            consumer.ack(some)
        elif op == "nack":
            consumer.negative_acknowledge(some)
        else:
            consumer.close()
            del self.consumers[name]
        return (op, name, some)


@pytest.mark.parametrize(("kind", "selector"), KINDS)
def test_redis_state_gives_the_in_process_answers(redis_url: str, kind: str, selector: str) -> None:
    sub_type = "key_shared" if kind == "key_shared" else kind
    opts = {"key_shared_selector": selector, "receiver_queue_size": 4, "read_batch": 5}
    local_broker, shared_broker = broker_with(), broker_with()
    local = Subscription(local_broker, "orders", "s", sub_type, **opts)
    subs: list[Subscription] = []

    def open_shared(_: str) -> Subscription:
        subs.append(Subscription(shared_broker, "orders", "s", sub_type, redis=redis_url, **opts))
        return subs[-1]

    models = (
        Model(lambda _: local, selector if kind == "key_shared" else kind),
        Model(open_shared, selector if kind == "key_shared" else kind),
    )
    for seed in range(3):
        rng_a, rng_b = random.Random(seed), random.Random(seed)
        for n in range(60):
            expected = models[0].step(rng_a, seed * 100 + n)
            assert models[1].step(rng_b, seed * 100 + n) == expected, (seed, n)
        assert subs[-1].committed() == local.committed()
    assert [shared_broker.committed("s", "orders", q) for q in range(3)] == [
        local_broker.committed("s", "orders", q) for q in range(3)
    ]


def test_a_consumer_removed_by_another_process_is_closed(redis_url: str) -> None:
    broker = broker_with(1, 10)
    first = Subscription(broker, "orders", "s", "shared", redis=redis_url, consumer_ttl=60)
    second = Subscription(broker, "orders", "s", "shared", redis=redis_url, consumer_ttl=60)
    a, b = first.subscribe("a"), second.subscribe("b")
    assert [m.value for m in a.receive(2)] == [b"v0", b"v2"]
    # a's process stops refreshing (its liveness key is gone): b's next call removes it
    first._shared.local.clear()
    redis.Redis.from_url(redis_url).delete(f"{first._shared.key}:alive:{a.seq}")
    got = b.receive(10)
    assert [(m.value, m.redelivery_count) for m in got][:2] == [(b"v1", 0), (b"v0", 1)]
    assert [c.name for c in second.consumers] == ["b"]


def test_wrong_type_or_queue_count_is_refused(redis_url: str) -> None:
    broker = broker_with(1, 3)
    Subscription(broker, "orders", "s", "key_shared", redis=redis_url)
    with pytest.raises(ConfigError, match="exists as 'key_shared'"):
        Subscription(broker, "orders", "s", "shared", redis=redis_url)
    with pytest.raises(ConfigError, match="selector"):
        Subscription(
            broker, "orders", "s", "key_shared", redis=redis_url, key_shared_selector="auto_split"
        )
    other = MemoryBroker()
    other.create_topic("orders", 2)
    with pytest.raises(ConfigError, match="has 1 queues but the topic has 2"):
        Subscription(other, "orders", "s", "key_shared", redis=redis_url)


def test_closing_a_subscription_closes_only_its_own_consumers(redis_url: str) -> None:
    broker = broker_with(1, 3)
    first = Subscription(broker, "orders", "s", "shared", redis=redis_url)
    second = Subscription(broker, "orders", "s", "shared", redis=redis_url)
    a, b = first.subscribe("a"), second.subscribe("b")
    first.close()
    assert a.closed and not b.closed
    assert [c.name for c in second.consumers] == ["b"]
    with pytest.raises(ConsumerClosedError):
        a.receive()


def test_docs_example_runs(redis_url: str) -> None:
    """docs/groups.md's Redis example (the block marked ``snippet: redis``), against the
    test's server."""
    text = (Path(__file__).parents[2] / "docs" / "groups.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- snippet: redis[^\n]*-->\n```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1
    exec(blocks[0].replace("redis://127.0.0.1:6379/0", redis_url), {})
    assert redis.Redis.from_url(redis_url).exists("rs:{shop}:sub:orders:billing")


def test_a_redis_restart_loses_nothing(own_redis: Any) -> None:
    """Redis SIGKILLed between operations, and restarted (appendfsync always) while the
    next operation waits for it: that operation retries until Redis is back, and the
    subscription goes on where it was."""
    broker = broker_with(2, 40)
    sub_a = Subscription(broker, "orders", "s", "shared", redis=own_redis.url, read_batch=3)
    sub_b = Subscription(broker, "orders", "s", "shared", redis=own_redis.url, read_batch=3)
    a, b = sub_a.subscribe("a"), sub_b.subscribe("b")
    acked: list[bytes] = []
    for i in range(12):
        consumer = (a, b)[i % 2]
        got = consumer.receive(3)
        if i % 4 == 1:
            own_redis.stop(signal.SIGKILL)
            back = threading.Timer(0.3, own_redis.start)
            back.start()
            consumer.ack(got)  # refused until Redis is back: retried meanwhile
            back.join()
        else:
            consumer.ack(got)
        acked += [m.value for m in got]
    while got := a.receive(10) + b.receive(10):
        a.ack(got)
        acked += [m.value for m in got]
    assert sorted(acked) == sorted(b"v%d" % i for i in range(40))
    assert sub_a.committed() == {0: 20, 1: 20}
