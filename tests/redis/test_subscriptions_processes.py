"""Subscriptions whose consumers live in separate processes, sharing their state in Redis.

Each consumer runs in its own ``python subconsumer.py`` process (a FileBroker on a shared
directory for the records, a real redis-server for the subscription state); the test
drives them one command at a time and SIGKILLs them by pid.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from subconsumer import RemoteConsumer, RemoteError

from rstreams.runtime.queues import FileBroker
from rstreams.runtime.queues.redisstreams import RedisBroker, RedisTarget

TTL = 1.0  # seconds without heartbeat before a killed consumer is removed


def make_topic(root: Path, queues: int, count: int, keys: int = 3) -> None:
    """``count`` records v0.. spread round-robin over the queues; key ``k<i % keys>``."""
    broker = FileBroker(root)
    broker.create_topic("orders", queues)
    for q in range(queues):
        rows = [(i, f"k{i % keys}".encode(), f"v{i}".encode(), ()) for i in range(q, count, queues)]
        broker.append("orders", q, rows)
    broker.close()


@pytest.fixture
def spawn(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., RemoteConsumer]]:
    procs: list[RemoteConsumer] = []

    def start(kind: str, **cfg: Any) -> RemoteConsumer:
        cfg.setdefault("ttl", TTL)
        proc = RemoteConsumer(
            broker=str(tmp_path / "broker"),
            topic="orders",
            subscription="sub",
            type=kind,
            redis=redis_url,
            **cfg,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.stop()


def eventually(fn: Callable[[], Any], what: str, limit: float = 60.0) -> Any:
    """Poll ``fn`` until it returns something truthy (the limit only ends a failing test)."""
    deadline = time.monotonic() + limit
    while True:
        got = fn()
        if got:
            return got
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def values(messages: list[list[Any]]) -> list[str]:
    return [m[3] for m in messages]


def ids(messages: list[list[Any]]) -> list[list[int]]:
    return [[m[0], m[1]] for m in messages]


def a_and_b(
    spawn: Callable[..., RemoteConsumer], root: Path, kind: str
) -> tuple[RemoteConsumer, RemoteConsumer]:
    """Ten records on one queue, two consumer processes; "a" subscribed."""
    make_topic(root, 1, 10)
    a, b = spawn(kind), spawn(kind)
    a.call("subscribe", name="a")
    return a, b


def test_exclusive_is_busy_across_processes_until_its_consumer_dies(
    spawn: Callable[..., RemoteConsumer], tmp_path: Path
) -> None:
    a, b = a_and_b(spawn, tmp_path / "broker", "exclusive")
    with pytest.raises(RemoteError) as busy:
        b.call("subscribe", name="b")
    assert busy.value.kind == "ConsumerBusyError"
    assert "'a' is connected" in str(busy.value)
    assert values(a.call("receive", n=3)) == ["v0", "v1", "v2"]
    a.kill()

    def join() -> bool:
        try:
            return bool(b.call("subscribe", name="b"))
        except RemoteError as e:
            assert e.kind == "ConsumerBusyError"
            return False

    eventually(join, "b subscribes once a's liveness expired")
    got = b.call("receive", n=10)
    # a received v0..v2 and never acknowledged them: b gets them again, first, in order.
    assert [(m[3], m[4]) for m in got] == [(f"v{i}", int(i < 3)) for i in range(10)]


def test_shared_round_robin_and_redelivery_of_a_killed_consumer(
    spawn: Callable[..., RemoteConsumer], tmp_path: Path
) -> None:
    a, b = a_and_b(spawn, tmp_path / "broker", "shared")
    b.call("subscribe", name="b")
    # a's receive dispatches round robin: every other message to b's receiver queue.
    assert values(a.call("receive", n=4)) == ["v0", "v2", "v4", "v6"]
    got_b = b.call("receive", n=3)
    assert values(got_b) == ["v1", "v3", "v5"]
    b_acked = {m[3]: m[4] for m in got_b}
    b.call("ack", name="b", ids=ids(got_b))
    a.kill()  # v0, v2, v4, v6 received, never acknowledged

    def drain() -> bool:
        got = b.call("receive", name="b", n=10, timeout=0.1)
        b.call("ack", name="b", ids=ids(got))
        b_acked.update({m[3]: m[4] for m in got})
        return len(b_acked) == 10

    eventually(drain, "b received every message")
    assert b_acked == {f"v{i}": int(i in (0, 2, 4, 6)) for i in range(10)}
    assert b.call("consumers") == ["b"]


def test_failover_takeover_across_processes(
    spawn: Callable[..., RemoteConsumer], tmp_path: Path
) -> None:
    make_topic(tmp_path / "broker", 2, 10)  # queue 0: v0 v2 ..; queue 1: v1 v3 ..
    a, b, c = spawn("failover"), spawn("failover"), spawn("failover")
    a.call("subscribe", name="a")
    b.call("subscribe", name="b")
    c.call("subscribe", name="c", priority=1)  # a standby
    assert [c.call("active", queue=q) for q in (0, 1)] == ["a", "b"]
    assert values(a.call("receive", name="a", n=10)) == ["v0", "v2", "v4", "v6", "v8"]
    assert c.call("receive", name="c", n=10) == []
    a.kill()
    eventually(lambda: b.call("active", queue=0) == "b", "b takes over queue 0")
    got = b.call("receive", name="b", n=10)
    by_queue = {q: [(m[3], m[4]) for m in got if m[0] == q] for q in (0, 1)}
    assert by_queue[0] == [(f"v{i}", 1) for i in range(0, 10, 2)]  # redelivered, in order
    assert by_queue[1] == [(f"v{i}", 0) for i in range(1, 10, 2)]
    b.call("ack_cumulative", name="b", ids=[[0, 4]])
    b.call("close", name="b")
    assert [c.call("active", queue=q) for q in (0, 1)] == ["c", "c"]
    # queue 0 was acknowledged; queue 1's messages come again to c
    assert [(m[3], m[4]) for m in c.call("receive", name="c", n=10)] == [
        (f"v{i}", 1) for i in range(1, 10, 2)
    ]


@pytest.mark.parametrize("selector", ["consistent_hashing", "auto_split", "sticky"])
def test_key_shared_order_holds_when_a_consumer_joins_mid_stream(
    spawn: Callable[..., RemoteConsumer], tmp_path: Path, selector: str
) -> None:
    make_topic(tmp_path / "broker", 2, 120, keys=16)
    ranges = {"a": [[0, 21844]], "b": [[21845, 43689]], "c": [[43690, 65535]]}
    procs: dict[str, RemoteConsumer] = {}

    def join(name: str) -> None:
        procs[name] = spawn("key_shared", selector=selector, receiver_queue_size=10)
        extra = {"ranges": ranges[name]} if selector == "sticky" else {}
        procs[name].call("subscribe", name=name, **extra)

    join("a")
    join("b")
    delivered: list[tuple[str, int, int, str, int]] = []  # (consumer, queue, offset, key, rc)
    acked: set[tuple[int, int]] = set()
    unacked: dict[str, list[list[int]]] = {}
    rounds = 0
    while len(acked) < 120:
        rounds += 1
        assert rounds < 1000, f"stuck with {len(acked)} of 120 acknowledged"
        if rounds == 4:
            join("c")  # while a's and b's messages are outstanding
        for name, proc in procs.items():
            got = proc.call("receive", name=name, n=5, timeout=0.02)
            for q, o, key, _, rc in got:
                # every earlier message of the key went to this consumer or was
                # acknowledged, and came earlier in its queue
                for d, q2, o2, k, _ in delivered:
                    if k == key:
                        assert d == name or (q2, o2) in acked, (key, d, name)
                        assert (q2, o2) < (q, o), (key, (q2, o2), (q, o))
                delivered.append((name, q, o, key, rc))
            # acknowledge what it received the round before (messages stay outstanding)
            proc.call("ack", name=name, ids=unacked.get(name, []))
            acked.update((q, o) for q, o in unacked.get(name, []))
            unacked[name] = ids(got)
    assert sorted((q, o) for _, q, o, _, _ in delivered) == sorted(acked)
    assert len(delivered) == 120 and {d[4] for d in delivered} == {0}
    for key in {d[3] for d in delivered}:
        owners = _owners(delivered, key)
        changes = [(x, y) for x, y in itertools.pairwise(owners) if x != y]
        # a key stays on its consumer; it may move once, to the consumer that joined
        assert changes in ([], [(owners[0], "c")]), (key, owners)
    assert any(d[0] == "c" for d in delivered), "the joining consumer took no key"


def _owners(delivered: list[tuple[str, int, int, str, int]], key: str) -> list[str]:
    return [d[0] for d in delivered if d[3] == key]


def test_shared_on_a_redis_broker_while_records_arrive(
    spawn: Callable[..., RemoteConsumer], redis_url: str
) -> None:
    """Records and subscription state both in Redis (a RedisBroker of job "j1"); the
    producer appends while three consumer processes read, and one of them is killed."""
    broker = RedisBroker.open(RedisTarget.parse(redis_url), "j1")
    broker.create_topic("orders", 2)
    procs = {name: spawn("shared", job="j1", receiver_queue_size=5) for name in "abc"}
    for name, proc in procs.items():
        proc.call("subscribe", name=name)
    acked: dict[str, int] = {}
    killed: list[str] = []
    sent = 0
    while len(acked) < 100:
        if sent < 100:
            for q in (0, 1):
                broker.append("orders", q, [(sent, b"k", b"v%d" % (sent + i), ()) for i in (0, 1)])
                sent += 2
        for name, proc in procs.items():
            got = proc.call("receive", n=7, timeout=0.02)
            if name == "b" and got and not killed:
                killed = values(got)  # received, never acknowledged
                proc.kill()
                break
            proc.call("ack", ids=ids(got))
            acked.update({m[3]: m[4] for m in got})
        if killed:
            procs.pop("b", None)
    assert sorted(acked) == sorted(f"v{i}" for i in range(100))
    assert killed and all(acked[v] == 1 for v in killed)
    assert [broker.committed("sub", "orders", q) for q in (0, 1)] == [50, 50]
    assert broker.client.exists("rs:{j1}:sub:orders:sub")
    broker.close()


def test_an_idle_consumer_stays_and_one_that_exits_leaves_at_once(
    spawn: Callable[..., RemoteConsumer], tmp_path: Path
) -> None:
    a, b = a_and_b(spawn, tmp_path / "broker", "failover")
    b.call("subscribe", name="b")
    time.sleep(3 * TTL)  # a calls nothing meanwhile: its heartbeat thread keeps it
    assert b.call("consumers") == ["a", "b"]
    a.stop()  # ends without closing its consumer
    assert b.call("consumers") == ["b"]
    assert b.call("active", queue=0) == "b"
