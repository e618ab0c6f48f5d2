"""A subscription's state in Redis: its consumers may live in several processes and hosts.

``Subscription(broker, topic, name, type, redis="redis://...")`` keeps the state that the
in-process dispatcher holds in memory in Redis instead, under two kinds of keys (every key
of a namespace shares the hash tag ``{namespace}``, so they live in one Redis Cluster slot):

- ``rs:{<namespace>}:sub:<topic>:<name>``: one JSON document: the subscription type and
  selector; the consumers in join order (name, priority level, the messages dispatched to
  it and not yet received); per queue the read position, the committed mark, the pending
  messages (dispatched, not acknowledged) with their consumer, the messages to dispatch
  again or held back, the redelivery counts; the active consumer per queue (exclusive,
  failover); key_shared hold-back marks of newly joined consumers; the selector's layout.
- ``rs:{<namespace>}:sub:<topic>:<name>:alive:<seq>``: one per consumer, expiring after
  ``consumer_ttl``; its process refreshes it on every operation and from a heartbeat
  thread. A consumer whose key expired (its process was killed or cut off) is removed by
  the next operation of any other consumer: its unacknowledged messages are dispatched
  to the others, as Pulsar does when a consumer's connection drops.

Every operation (subscribe, receive, ack, negative acknowledge, close) is one optimistic
transaction: WATCH the state key, load it into the Subscription's structures, run the
in-process dispatcher unchanged (so the four types, the selectors and the ordering
guarantee are exactly those of one process), and write the result with MULTI/EXEC; a
conflict with another process retries the whole operation. Records are not copied into
Redis: pending and held-back messages are read again from the broker by offset. The
broker's committed offsets (the first unacknowledged offset per queue) are written after
the transaction succeeded.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rstreams.errors import ConfigError
from rstreams.runtime.queues.base import LogRecord
from rstreams.runtime.subscriptions.selectors import make_selector

if TYPE_CHECKING:
    import redis

    from rstreams.runtime.queues.redisstreams import RedisTarget
    from rstreams.runtime.subscriptions.subscription import Consumer, Subscription, _Cursor

T = TypeVar("T")

#: the version of the JSON document; another version is refused, never misread
FORMAT = 1


class RedisState:
    """The Redis side of one :class:`~rstreams.runtime.subscriptions.Subscription`."""

    #: how often a waiting ``receive`` looks at Redis again (seconds)
    poll_interval = 0.02

    def __init__(
        self,
        sub: Subscription,
        client: str | RedisTarget | redis.Redis,
        namespace: str,
        consumer_ttl: float,
        selector_spec: Any,
        *,
        new_cursor: Callable[[int, int], _Cursor],
        new_consumer: Callable[[Subscription, str, int, int], Consumer],
    ) -> None:
        if sub.selector is not None and not isinstance(selector_spec, str):
            raise ConfigError(
                "a key_shared subscription whose state is in Redis needs a named selector "
                "('consistent_hashing', 'auto_split' or 'sticky'): a selector object "
                "cannot be shared between processes"
            )
        if consumer_ttl <= 0:
            raise ConfigError(f"consumer_ttl must be > 0 seconds; got {consumer_ttl}")
        if not namespace or set(namespace) & set("{}"):
            raise ConfigError(
                f"a subscription's Redis namespace must be a non-empty name without braces; "
                f"got {namespace!r}"
            )
        self.sub = sub
        # (the classes come from subscription.py, which imports this module)
        self.new_cursor, self.new_consumer = new_cursor, new_consumer
        self.client = _client(client)
        self.key = f"rs:{{{namespace}}}:sub:{sub.topic}:{sub.name}"
        self.ttl_ms = max(1, int(consumer_ttl * 1000))
        self.selector_spec = selector_spec if sub.selector is not None else None
        self.known: dict[int, Consumer] = {}  # every consumer of the loaded state, by seq
        self.local: dict[int, Consumer] = {}  # those of this process
        self.records: dict[tuple[int, int], LogRecord] = {}  # pending/held, by (queue, offset)
        self.commits: dict[int, int] = {}
        self._heartbeat: threading.Thread | None = None
        self.executing = False
        self.retry_for = consumer_ttl  # seconds an unreachable Redis is waited for
        self.run(lambda: None)  # fail now on a wrong type, selector or queue count
        # A process that ends without closing its consumers lets them go at once, as a
        # closed Pulsar connection does; only a killed one waits for consumer_ttl.
        atexit.register(_leave_at_exit, weakref.ref(sub))

    def _alive_key(self, seq: int) -> str:
        return f"{self.key}:alive:{seq}"

    def local_consumers(self) -> list[Consumer]:
        """The consumers this process subscribed and that are still connected."""
        return list(self.local.values())

    def commit_later(self, queue: int, mark: int) -> None:
        """Commit ``mark`` to the broker once the running transaction succeeded."""
        self.commits[queue] = mark

    # -- transactions ---------------------------------------------------------------------

    def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the state loaded from Redis and save it atomically (retrying
        when another process changed the state in between).

        A connection error before the transaction was sent is retried with backoff for
        up to ``consumer_ttl`` (nothing was applied: Redis restarting, a dropped
        connection); one while it was being sent is raised, as it may have been applied.
        """
        import redis

        sub = self.sub
        deadline = time.monotonic() + self.retry_for
        backoff = 0.01
        with sub._lock:
            while True:
                self.executing = False
                with self.client.pipeline() as pipe:
                    try:
                        result, local, lost = self._attempt(pipe, fn)
                    except redis.WatchError:
                        continue
                    except (redis.ConnectionError, redis.TimeoutError):
                        if self.executing or time.monotonic() > deadline:
                            raise
                        time.sleep(backoff)
                        backoff = min(backoff * 2, 0.5)
                        continue
                self.local = local
                for consumer in lost:
                    consumer._closed = True  # removed by another process (liveness expired)
                if local:
                    self._start_heartbeat()
                for queue, mark in sorted(self.commits.items()):
                    sub.broker.commit(sub.name, sub.topic, queue, mark)
                return result

    def _attempt(
        self, pipe: Any, fn: Callable[[], T]
    ) -> tuple[T, dict[int, Consumer], list[Consumer]]:
        sub = self.sub
        self.commits = {}
        pipe.watch(self.key)
        raw = pipe.get(self.key)
        state = None if raw is None else json.loads(raw)
        self._load(state)
        before = None if state is None else self._dump()
        loaded = list(sub._consumers)
        flags = pipe.mget([self._alive_key(c.seq) for c in loaded]) if loaded else []
        for consumer, flag in zip(loaded, flags):
            if flag is None and consumer.seq not in self.local:
                sub._remove(consumer)  # its process stopped refreshing it: gone
        result = fn()
        after = self._dump()
        seqs = {c.seq for c in loaded}
        now = {c.seq: c for c in sub._consumers}
        local = {s: c for s, c in now.items() if s in self.local or s not in seqs}
        lost = [c for s, c in self.local.items() if s not in local]
        pipe.multi()
        if after != before:
            pipe.set(self.key, after)
        for seq in local:
            pipe.set(self._alive_key(seq), b"1", px=self.ttl_ms)
        for consumer in lost:
            pipe.delete(self._alive_key(consumer.seq))
        self.executing = True  # from here on, Redis may have applied it
        pipe.execute()
        return result, local, lost

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None:
            # It lives as long as this object (it holds only a weak reference to it).
            self._heartbeat = threading.Thread(
                target=_beat,
                args=(weakref.ref(self), self.ttl_ms / 4000),
                name=f"rstreams-sub-heartbeat-{self.sub.name}",
                daemon=True,
            )
            self._heartbeat.start()

    def beat(self) -> None:
        """Refresh the liveness keys of this process's consumers."""
        import redis

        local = list(self.local)
        if not local:
            return
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for seq in local:
                    pipe.set(self._alive_key(seq), b"1", px=self.ttl_ms)
                pipe.execute()
        except redis.RedisError:
            pass  # Redis unreachable: the next operation reports it

    # -- (de)serialization ----------------------------------------------------------------

    def _fresh(self) -> None:
        """A subscription nobody opened yet: positions from the broker's committed
        offsets, no consumers."""
        sub, broker = self.sub, self.sub.broker
        sub._cursors = [
            self.new_cursor(
                q, max(broker.committed(sub.name, sub.topic, q), broker.start_offset(sub.topic, q))
            )
            for q in range(sub.queue_count)
        ]
        sub._consumers = []
        sub._active = [None] * sub.queue_count
        sub._joined_behind = {}
        sub._rr = sub._next_queue = 0
        # Consumer numbers are never reused, even if the state was deleted meanwhile.
        sub._seq = itertools.count(int(time.time() * 1000))
        if self.selector_spec is not None:
            sub.selector = make_selector(self.selector_spec)
        self.known = {}

    def _check_state(self, state: dict[str, Any]) -> None:
        sub = self.sub
        where = f"subscription {sub.name!r} on topic {sub.topic!r} (Redis key {self.key!r})"
        if state.get("format") != FORMAT:
            raise ConfigError(
                f"{where} has state format {state.get('format')!r}; expected {FORMAT}"
            )
        if state["type"] != sub.type.value or state["selector"] != self.selector_spec:
            raise ConfigError(
                f"{where} exists as {state['type']!r} (selector {state['selector']!r}); "
                f"cannot open it as {sub.type.value!r} (selector {self.selector_spec!r})"
            )
        if len(state["cursors"]) != sub.queue_count:
            raise ConfigError(
                f"{where} has {len(state['cursors'])} queues but the topic has "
                f"{sub.queue_count}; delete the key to start it again"
            )

    def _load(self, state: dict[str, Any] | None) -> None:
        if state is None:
            self._fresh()
            return
        self._check_state(state)
        sub = self.sub
        known: dict[int, Consumer] = {}
        for seq, name, priority, _ in state["consumers"]:
            consumer = self.known.get(seq) or self.local.get(seq)
            if consumer is None:
                consumer = self.new_consumer(sub, name, priority, seq)
            consumer._inbox.clear()
            known[seq] = consumer
        self.known = known
        self._fetch(state["cursors"])
        sub._cursors = []
        for q, cs in enumerate(state["cursors"]):
            cursor = self.new_cursor(q, cs["read"])
            cursor.committed = cs["committed"]
            cursor.pending = {o: (known[s], self.records[(q, o)]) for o, s in cs["pending"]}
            cursor.replay = {o: self.records[(q, o)] for o in cs["replay"]}
            cursor.redeliveries = {o: n for o, n in cs["redeliveries"]}
            cursor.outstanding = deque(sorted([*cursor.pending, *cursor.replay]))
            sub._cursors.append(cursor)
        for seq, _, _, inbox in state["consumers"]:
            for q, o in inbox:  # dispatched, not received: in dispatch order
                sub._deliver(sub._cursors[q], self.records[(q, o)], known[seq])
        sub._consumers = list(known.values())
        sub._active = [None if s is None else known[s] for s in state["active"]]
        sub._joined_behind = {
            known[s]: {q: set(offsets) for q, offsets in marks} for s, marks in state["behind"]
        }
        sub._rr, sub._next_queue = state["rr"], state["next_queue"]
        sub._seq = itertools.count(state["seq"])
        if self.selector_spec is not None:
            sub.selector = make_selector(self.selector_spec)
            sub.selector.restore(state["selector_state"], known.__getitem__)

    def _fetch(self, cursors: list[dict[str, Any]]) -> None:
        """Read the records of pending and held-back messages not in the cache."""
        sub = self.sub
        wanted = {(q, o) for q, cs in enumerate(cursors) for o, _ in cs["pending"]}
        wanted |= {(q, o) for q, cs in enumerate(cursors) for o in cs["replay"]}
        self.records = {k: r for k, r in self.records.items() if k in wanted}
        missing = sorted(wanted - self.records.keys())
        while missing:
            q, lo = missing[0]
            hi = max(o for qq, o in missing if qq == q)
            for record in sub.broker.read(sub.topic, q, lo, min(hi - lo + 1, 1000)):
                self.records[(q, record.offset)] = record
            if (q, lo) not in self.records:
                raise ConfigError(
                    f"message {q}:{lo} of topic {sub.topic!r} is pending in subscription "
                    f"{sub.name!r} but the broker no longer has it (purged or compacted "
                    "under the subscription)"
                )
            missing = [k for k in missing if k not in self.records]

    def _dump(self) -> str:
        sub = self.sub
        seq = next(sub._seq)
        sub._seq = itertools.count(seq)  # (a peek)
        cursors = []
        self.records = {}
        for cur in sub._cursors:
            cursors.append(
                {
                    "read": cur.read_pos,
                    "committed": cur.committed,
                    "pending": sorted([o, c.seq] for o, (c, _) in cur.pending.items()),
                    "replay": sorted(cur.replay),
                    "redeliveries": sorted([o, n] for o, n in cur.redeliveries.items()),
                }
            )
            self.records.update(((cur.queue, o), r) for o, (_, r) in cur.pending.items())
            self.records.update(((cur.queue, o), r) for o, r in cur.replay.items())
        state = {
            "format": FORMAT,
            "type": sub.type.value,
            "selector": self.selector_spec,
            "seq": seq,
            "rr": sub._rr,
            "next_queue": sub._next_queue,
            "consumers": [[c.seq, c.name, c.priority, list(c._inbox)] for c in sub._consumers],
            "cursors": cursors,
            "active": [None if c is None else c.seq for c in sub._active],
            "behind": sorted(
                [c.seq, sorted([q, sorted(offs)] for q, offs in marks.items())]
                for c, marks in sub._joined_behind.items()
            ),
            "selector_state": None
            if sub.selector is None
            else sub.selector.export(lambda c: c.seq),
        }
        return json.dumps(state, separators=(",", ":"))


def _beat(ref: weakref.ref[RedisState], interval: float) -> None:
    while (state := ref()) is not None:
        state.beat()
        del state  # (no strong reference while sleeping)
        time.sleep(interval)


def _leave_at_exit(ref: weakref.ref[Subscription]) -> None:
    sub = ref()
    if sub is not None and sub._shared is not None:
        sub._shared.retry_for = 0  # never hold up the exit
        with contextlib.suppress(Exception):  # Redis may be gone already: the TTL does it
            for consumer in sub._shared.local_consumers():
                consumer.close()


def _client(spec: str | RedisTarget | redis.Redis) -> redis.Redis:
    """A checked client (reachable, authenticated, Redis >= 7.0) of a URL or target, as
    the Redis broker connects; a client is used as given."""
    from rstreams.runtime.queues.redisstreams import RedisTarget, connect

    if isinstance(spec, str):
        spec = RedisTarget.parse(spec)
    return connect(spec) if isinstance(spec, RedisTarget) else spec


__all__ = ["FORMAT", "RedisState"]
