"""Subscriptions with Pulsar semantics over any :class:`~rstreams.runtime.queues.Broker`.

A :class:`Subscription` is a named cursor over every queue of a topic, shared by the
consumers that subscribe to it. How messages are spread over those consumers depends on
the subscription type:

- ``exclusive`` (default): one consumer; a second one gets :class:`ConsumerBusyError`.
- ``failover``: every consumer may connect, one is active per queue (see
  :func:`failover_active_consumer`); the others stand by and take over, in order, with
  the unacknowledged messages of the queue redelivered to the new active consumer.
- ``shared``: messages go round-robin to the consumers that have room, highest
  priority level (lowest number) first; a leaving consumer's unacknowledged messages
  are redelivered to the others. No ordering guarantee.
- ``key_shared``: all messages of a key go to the same consumer, chosen by a selector
  (consistent hashing by default, as in Pulsar 4.x; auto-split hash ranges; or sticky
  ranges given by each consumer). When keys move to a newly added consumer it gets no
  message until every message dispatched before it joined is acknowledged (or returned
  by a leaving consumer), so each key is processed in order;
  ``allow_out_of_order_delivery=True`` turns this off.

Coordination is in-process: the consumers of one subscription must share one
Subscription object (create it once per process and subscription name; it is
thread-safe). Progress is persisted as the broker's committed offsets, with the
subscription name as the group: per queue, the first offset not yet acknowledged.
Individual acknowledgements above that offset live in memory only, so after a restart
those messages are delivered again (at-least-once).

Delivery is pull-based: ``receive`` dispatches messages from the broker to the
consumers — to the caller and, as Pulsar pushes to receiver queues, to the others up
to ``receiver_queue_size`` each — and returns the caller's.

>>> from rstreams.runtime.queues import MemoryBroker
>>> broker = MemoryBroker(); broker.create_topic("orders", 1)
>>> _ = broker.append("orders", 0, [(0, b"k", b"v%d" % i, ()) for i in range(3)])
>>> sub = Subscription(broker, "orders", "billing", subscription_type="shared")
>>> a, b = sub.subscribe("a"), sub.subscribe("b")
>>> got_a, got_b = a.receive(2), b.receive(2)
>>> [m.value for m in got_a], [m.value for m in got_b]
([b'v0', b'v2'], [b'v1'])
>>> a.ack(got_a); b.close()  # b leaves without acknowledging: v1 goes to a
>>> [(m.value, m.redelivery_count) for m in a.receive(5)]
[(b'v1', 1)]
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from rstreams.errors import ConfigError
from rstreams.runtime.queues.base import LogRecord
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.subscriptions.consumer import Consumer
from rstreams.runtime.subscriptions.errors import ConsumerBusyError, ConsumerClosedError
from rstreams.runtime.subscriptions.failover import failover_active_index
from rstreams.runtime.subscriptions.hashing import NONE_KEY, sticky_key_hash
from rstreams.runtime.subscriptions.messages import Message, MessageRef, SubscriptionType
from rstreams.runtime.subscriptions.selectors import StickyHashRangeSelector, make_selector


class _Cursor:
    """One queue's state in the subscription.

    Every offset below ``read_pos`` is acknowledged, pending (dispatched to a consumer and
    not acknowledged) or in ``replay`` (to dispatch again, or held back for ordering).
    ``outstanding`` lists pending and replay offsets in increasing order (lazily pruned);
    its head is the committed position.
    """

    __slots__ = (
        "committed",
        "outstanding",
        "pending",
        "queue",
        "read_pos",
        "redeliveries",
        "replay",
    )

    def __init__(self, queue: int, position: int) -> None:
        self.queue = queue
        self.read_pos = position
        self.committed = position
        self.pending: dict[int, tuple[Consumer, LogRecord]] = {}
        self.replay: dict[int, LogRecord] = {}
        self.redeliveries: dict[int, int] = {}
        self.outstanding: deque[int] = deque()

    def is_outstanding(self, offset: int) -> bool:
        return offset in self.pending or offset in self.replay

    def mark(self) -> int:
        """The first offset not acknowledged (what the broker gets as committed offset)."""
        out = self.outstanding
        while out and not self.is_outstanding(out[0]):
            out.popleft()
        return out[0] if out else self.read_pos


T = TypeVar("T")

_HOLD = object()  # key_shared: keep in replay, look further
_STOP = object()  # nobody can take it now: stop this queue for this pass


def _queue_count(broker: Broker, topic: str, name: str) -> int:
    """The queue count of ``topic``, which a subscription named ``name`` reads: it must
    exist, and the subscription needs a name (its group on the broker)."""
    if not name:
        raise ConfigError("a subscription needs a non-empty name")
    queue_count = broker.queue_count(topic)
    if queue_count is None:
        raise ConfigError(f"topic {topic!r} does not exist; create it first (broker.create_topic)")
    return queue_count


class Subscription:
    """A named subscription to every queue of ``topic`` on ``broker``.

    ``key_shared_selector``: ``"consistent_hashing"`` (default, Pulsar 4.x's default),
    ``"auto_split"`` or ``"sticky"`` (each consumer passes ``hash_ranges``), or a selector
    object. ``receiver_queue_size`` caps the messages dispatched to a consumer and not
    yet received; ``max_look_ahead`` caps the messages held back (key_shared) before
    reading from the broker pauses.

    ``redis`` (a ``redis://`` URL, a ``RedisTarget`` or a ``redis.Redis`` client) moves
    the subscription's state to Redis, so consumers in other processes and hosts that
    open the same ``namespace`` (default: a RedisBroker's job, else ``"default"``), topic
    and name share it (see
    :mod:`rstreams.runtime.subscriptions.redisstate`); a consumer whose process stops
    refreshing its liveness for ``consumer_ttl`` seconds is removed and its
    unacknowledged messages go to the others.
    """

    def __init__(
        self,
        broker: Broker,
        topic: str,
        name: str,
        subscription_type: SubscriptionType | str = SubscriptionType.EXCLUSIVE,
        *,
        key_shared_selector: str | Any = "consistent_hashing",
        allow_out_of_order_delivery: bool = False,
        receiver_queue_size: int = 1000,
        max_look_ahead: int = 10_000,
        read_batch: int = 100,
        redis: Any = None,
        namespace: str | None = None,
        consumer_ttl: float = 10.0,
    ) -> None:
        queue_count = _queue_count(broker, topic, name)
        if receiver_queue_size < 1:
            raise ConfigError(f"receiver_queue_size must be >= 1; got {receiver_queue_size}")
        if max_look_ahead < 1 or read_batch < 1:
            raise ConfigError("max_look_ahead and read_batch must be >= 1")
        self.broker = broker
        self.topic = topic
        self.name = name
        self.type = SubscriptionType.parse(subscription_type)
        self.allow_out_of_order_delivery = allow_out_of_order_delivery
        self.receiver_queue_size = receiver_queue_size
        self.max_look_ahead = max_look_ahead
        self.read_batch = read_batch
        self.selector: Any = None
        if self.type is SubscriptionType.KEY_SHARED:
            self.selector = make_selector(key_shared_selector)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._consumers: list[Consumer] = []
        self._seq = itertools.count()
        self._rr = 0  # shared: next consumer to try
        self._next_queue = 0  # queue to start the next dispatch pass at
        self._cursors = [
            _Cursor(q, max(broker.committed(name, topic, q), broker.start_offset(topic, q)))
            for q in range(queue_count)
        ]
        self._active: list[Consumer | None] = [None] * queue_count  # exclusive/failover
        # key_shared: consumer -> per queue, offsets that were pending when it joined
        self._joined_behind: dict[Consumer, dict[int, set[int]]] = {}
        self._closed = False
        self._shared: Any = None  # a RedisState when the state lives in Redis
        if redis is not None:
            from rstreams.runtime.subscriptions.redisstate import RedisState

            self._shared = RedisState(
                self,
                redis,
                namespace or getattr(broker, "namespace", None) or "default",
                consumer_ttl,
                key_shared_selector,
                new_cursor=_Cursor,
                new_consumer=Consumer,
            )

    def _apply(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the subscription's state: under the lock in-process; on the
        state loaded from Redis and saved back atomically when it is shared."""
        if self._shared is not None:
            return self._shared.run(fn)
        with self._lock:
            return fn()

    def _pause(self, seconds: float) -> None:
        """Wait for a change: acks and joins wake us in-process; Redis is polled."""
        if self._shared is not None:
            time.sleep(max(seconds, self._shared.poll_interval))
            return
        with self._lock:
            self._changed.wait(seconds)

    def __repr__(self) -> str:
        return (
            f"Subscription(topic={self.topic!r}, name={self.name!r}, "
            f"type={self.type.value!r}, consumers={[c.name for c in self._consumers]})"
        )

    # -- membership -----------------------------------------------------------------------

    @property
    def consumers(self) -> list[Consumer]:
        """Connected consumers, in the order they subscribed."""
        return self._apply(lambda: list(self._consumers))

    @property
    def queue_count(self) -> int:
        return len(self._cursors)

    def subscribe(
        self,
        consumer_name: str,
        priority: int = 0,
        *,
        hash_ranges: Iterable[tuple[int, int]] | None = None,
    ) -> Consumer:
        """Connect a consumer. ``priority`` is Pulsar's priority level (0 is the highest);
        ``hash_ranges`` are the inclusive slot ranges of a sticky key_shared consumer."""
        if not consumer_name:
            raise ConfigError("a consumer needs a non-empty name")
        ranges = None if hash_ranges is None else list(hash_ranges)
        return self._apply(lambda: self._join(consumer_name, priority, ranges))

    def _join(
        self, consumer_name: str, priority: int, hash_ranges: list[tuple[int, int]] | None
    ) -> Consumer:
        self._check_open()
        if self.type is SubscriptionType.EXCLUSIVE and self._consumers:
            raise ConsumerBusyError(
                f"subscription {self.name!r} on topic {self.topic!r} is exclusive and "
                f"consumer {self._consumers[0].name!r} is connected; close it first, "
                "or use subscription_type='failover', 'shared' or 'key_shared'"
            )
        if hash_ranges is not None and not isinstance(self.selector, StickyHashRangeSelector):
            raise ConfigError(
                "hash_ranges is only for key_shared subscriptions with the 'sticky' selector"
            )
        consumer = Consumer(self, consumer_name, priority, next(self._seq))
        if isinstance(self.selector, StickyHashRangeSelector):
            self.selector.add_consumer(consumer, hash_ranges)
        elif self.selector is not None:
            self.selector.add_consumer(consumer)
        if (
            self.selector is not None
            and getattr(self.selector, "moves_keys_on_join", True)
            and not self.allow_out_of_order_delivery
        ):
            behind = {c.queue: set(c.pending) for c in self._cursors if c.pending}
            if behind:
                self._joined_behind[consumer] = behind
        self._consumers.append(consumer)
        self._reassign_active()
        self._changed.notify_all()
        return consumer

    def _remove(self, consumer: Consumer) -> None:
        if consumer not in self._consumers:
            return
        self._consumers.remove(consumer)
        if self.selector is not None:
            self.selector.remove_consumer(consumer)
        self._joined_behind.pop(consumer, None)
        for cursor in self._cursors:
            for offset in [o for o, (c, _) in cursor.pending.items() if c is consumer]:
                self._to_replay(cursor, offset)
        consumer._inbox.clear()
        self._reassign_active()
        self._changed.notify_all()

    def _reassign_active(self) -> None:
        if self.type is SubscriptionType.EXCLUSIVE:
            self._active = [self._consumers[0] if self._consumers else None] * self.queue_count
        elif self.type is SubscriptionType.FAILOVER:
            pairs = [(c.name, c.priority) for c in self._consumers]
            for cursor in self._cursors:
                q = cursor.queue
                new = self._consumers[failover_active_index(q, pairs)] if pairs else None
                old = self._active[q]
                if new is not old and old is not None:
                    # Like Pulsar's cursor rewind: the new active consumer gets every
                    # unacknowledged message of the queue again, in order.
                    for offset in list(cursor.pending):
                        self._to_replay(cursor, offset)
                self._active[q] = new

    def active_consumer(self, queue: int) -> Consumer | None:
        """The consumer receiving queue ``queue`` (exclusive and failover subscriptions)."""
        if self.type not in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
            raise ConfigError(f"a {self.type.value} subscription has no single active consumer")
        return self._apply(lambda: self._active[queue])

    def close(self) -> None:
        """Close every consumer (of this process, when the state is in Redis); the
        committed offsets stay for the next Subscription."""
        with self._lock:
            mine = self._shared.local_consumers() if self._shared else list(self._consumers)
            for consumer in mine:
                consumer.close()
            self._closed = True
            self._changed.notify_all()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError(f"subscription {self.name!r} on {self.topic!r} is closed")

    # -- positions ------------------------------------------------------------------------

    def committed(self) -> dict[int, int]:
        """Per queue, the first offset not acknowledged (as committed to the broker)."""
        return self._apply(lambda: {c.queue: c.mark() for c in self._cursors})

    def _commit(self, cursor: _Cursor) -> None:
        mark = cursor.mark()
        if mark != cursor.committed:
            if self._shared is not None:
                self._shared.commit_later(cursor.queue, mark)  # once the state is saved
            else:
                self.broker.commit(self.name, self.topic, cursor.queue, mark)
            cursor.committed = mark

    # -- state changes --------------------------------------------------------------------

    def _to_replay(self, cursor: _Cursor, offset: int) -> None:
        """Take a pending message back from its consumer, to dispatch again."""
        consumer, record = cursor.pending.pop(offset)
        if consumer._inbox.pop((cursor.queue, offset), None) is None:
            # It had been received: count the redelivery.
            cursor.redeliveries[offset] = cursor.redeliveries.get(offset, 0) + 1
        cursor.replay[offset] = record

    def _ack(self, refs: Iterable[MessageRef], cumulative: bool = False) -> None:
        touched: set[int] = set()
        for ref in refs:
            queue, offset = ref.id if isinstance(ref, Message) else ref
            if not 0 <= queue < len(self._cursors):
                raise ValueError(f"topic {self.topic!r} has no queue {queue}")
            cursor = self._cursors[queue]
            if offset >= cursor.read_pos:
                raise ValueError(
                    f"message {queue}:{offset} of {self.topic!r} was never delivered "
                    f"to subscription {self.name!r}; cannot acknowledge it"
                )
            doomed = (
                [o for o in itertools.chain(cursor.pending, cursor.replay) if o <= offset]
                if cumulative
                else [offset]
            )
            for o in doomed:
                entry = cursor.pending.pop(o, None)
                if entry is not None:
                    entry[0]._inbox.pop((queue, o), None)
                cursor.replay.pop(o, None)
                cursor.redeliveries.pop(o, None)
            touched.add(queue)
        for queue in touched:
            self._commit(self._cursors[queue])
        if touched:
            self._changed.notify_all()

    def _nack(self, refs: Iterable[MessageRef]) -> None:
        for ref in refs:
            queue, offset = ref.id if isinstance(ref, Message) else ref
            cursor = self._cursors[queue]
            if offset in cursor.pending:
                self._to_replay(cursor, offset)

    # -- dispatch -------------------------------------------------------------------------

    def _has_room(self, consumer: Consumer) -> bool:
        return len(consumer._inbox) < self.receiver_queue_size

    def _is_held_back(self, consumer: Consumer, queue: int) -> bool:
        """key_shared ordering: a consumer that joined while messages were pending waits
        until all of them are acknowledged (or returned by a leaving consumer)."""
        behind = self._joined_behind.get(consumer)
        if not behind or queue not in behind:
            return False
        cursor = self._cursors[queue]
        waiting = behind[queue]
        for offset in list(waiting):
            entry = cursor.pending.get(offset)
            if entry is None or entry[0] is consumer:
                waiting.discard(offset)
        if waiting:
            return True
        del behind[queue]
        if not behind:
            del self._joined_behind[consumer]
        return False

    def _next_shared(self) -> Consumer | None:
        ready = [c for c in self._consumers if self._has_room(c)]
        if not ready:
            return None
        best = min(c.priority for c in ready)
        n = len(self._consumers)
        for step in range(n):
            i = (self._rr + step) % n
            c = self._consumers[i]
            if c.priority == best and self._has_room(c):
                self._rr = i + 1
                return c
        return None  # pragma: no cover (ready is not empty)

    def _route(self, queue: int, record: LogRecord, blocked: set[tuple[int, int]]) -> Any:
        if self.type is SubscriptionType.SHARED:
            return self._next_shared() or _STOP
        if self.type is not SubscriptionType.KEY_SHARED:
            active = self._active[queue]
            return active if active is not None and self._has_room(active) else _STOP
        key = record.key if record.key is not None else NONE_KEY
        h = sticky_key_hash(key)
        if (queue, h) in blocked:
            return _HOLD  # an earlier message of this key is held: keep the order
        target = self.selector.select(key)
        if target is None or not self._has_room(target) or self._is_held_back(target, queue):
            blocked.add((queue, h))
            return _HOLD
        return target

    def _deliver(self, cursor: _Cursor, record: LogRecord, consumer: Consumer) -> None:
        cursor.pending[record.offset] = (consumer, record)
        consumer._inbox[(cursor.queue, record.offset)] = Message(
            self.topic,
            cursor.queue,
            record.offset,
            record.key,
            record.value,
            record.timestamp,
            record.headers,
            cursor.redeliveries.get(record.offset, 0),
        )

    def _dispatch_queue(
        self, cursor: _Cursor, caller: Consumer, want: int, blocked: set[tuple[int, int]]
    ) -> bool:
        """One step on one queue: replay first (in offset order), then up to one batch of
        new records. True if anything moved."""
        moved = False
        for offset in sorted(cursor.replay):
            if len(caller._inbox) >= want:
                return moved
            record = cursor.replay[offset]
            target = self._route(cursor.queue, record, blocked)
            if target is _STOP:
                return moved
            if target is not _HOLD:
                del cursor.replay[offset]
                self._deliver(cursor, record, target)
                moved = True
        if len(caller._inbox) >= want or self._held_count() >= self.max_look_ahead:
            return moved
        records = self.broker.read(self.topic, cursor.queue, cursor.read_pos, self.read_batch)
        for record in records:
            if len(caller._inbox) >= want or self._held_count() >= self.max_look_ahead:
                break
            target = self._route(cursor.queue, record, blocked)
            if target is _STOP:
                break
            cursor.read_pos = record.offset + 1
            cursor.outstanding.append(record.offset)
            if target is _HOLD:
                cursor.replay[record.offset] = record
            else:
                self._deliver(cursor, record, target)
            moved = True
        return moved

    def _held_count(self) -> int:
        return sum(len(c.replay) for c in self._cursors)

    def _dispatch(self, caller: Consumer, want: int) -> None:
        blocked: set[tuple[int, int]] = set()
        n = len(self._cursors)
        moved = True
        while moved and len(caller._inbox) < want:
            moved = False
            start = self._next_queue
            for i in range(n):
                cursor = self._cursors[(start + i) % n]
                if self._dispatch_queue(cursor, caller, want, blocked):
                    moved = True
                if len(caller._inbox) >= want:
                    break
            self._next_queue = (start + 1) % n

    def _receive(self, consumer: Consumer, max_messages: int) -> list[Message]:
        out: list[Message] = []
        while len(out) < max_messages:
            need = min(max_messages - len(out), self.receiver_queue_size)
            if len(consumer._inbox) < need:
                self._dispatch(consumer, need)
            if not consumer._inbox:
                break
            while consumer._inbox and len(out) < max_messages:
                _, message = consumer._inbox.popitem_first()
                out.append(message)
        return out


__all__ = [
    "Broker",
    "Consumer",
    "Message",
    "Subscription",
    "SubscriptionType",
]
