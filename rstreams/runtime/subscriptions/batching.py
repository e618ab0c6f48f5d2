"""Key-based batching for producers to key_shared subscriptions.

Pulsar dispatches a whole batch to one consumer, picked by the batch's key, so a batch
that mixed keys would deliver some keys to the wrong consumer. The key-based batcher
(Pulsar's ``BatcherBuilder.KEY_BASED``) keeps one open batch per key instead: a batch
never mixes keys, and the messages of one key keep their order.

>>> b = KeyBasedBatcher(queue_count=4, max_messages=2)
>>> for k, v in [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)]:
...     for batch in b.add(k, str(v)):
...         print(batch.key, [r[2] for r in batch.records])
b'a' [b'1', b'3']
b'b' [b'2', b'4']
>>> [(batch.key, len(batch.records)) for batch in b.drain()]
[(b'a', 1)]
"""

from __future__ import annotations

import time

import attrs

from rstreams.errors import ConfigError
from rstreams.runtime.queues.base import Headers
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.queues.mapper import ModuloQueueMapper

Record = tuple[int, bytes | None, bytes | None, Headers]


def _as_bytes(x: bytes | str | None, what: str) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    raise TypeError(f"a message {what} must be bytes, str or None; got {type(x).__name__}")


@attrs.frozen
class Batch:
    """Records of one key for one queue, ready for ``broker.append(topic, queue, records)``."""

    queue: int
    key: bytes | None
    records: tuple[Record, ...]


_MODULO = ModuloQueueMapper()


class KeyBasedBatcher:
    """Groups messages into batches of a single key (and queue).

    A batch closes when it holds ``max_messages`` messages or ``max_bytes`` bytes of keys
    and values; :meth:`add` returns the batches it closed, :meth:`drain` the open ones.
    A key's queue is ``ModuloQueueMapper().route``'s, as for every rstreams producer;
    messages without key go to one queue per batch, rotating.
    """

    def __init__(self, queue_count: int, *, max_messages: int = 1000, max_bytes: int = 128 * 1024):
        if queue_count < 1:
            raise ConfigError(f"queue_count must be >= 1; got {queue_count}")
        if max_messages < 1 or max_bytes < 1:
            raise ConfigError(
                f"max_messages and max_bytes must be >= 1; got {max_messages}, {max_bytes}"
            )
        self.queue_count = queue_count
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        # open batches in the order they were opened: (queue, key) -> (records, bytes)
        self._open: dict[tuple[int, bytes | None], tuple[list[Record], int]] = {}
        self._none_queue = 0

    def __len__(self) -> int:
        """Messages waiting in open batches."""
        return sum(len(records) for records, _ in self._open.values())

    def _queue_of(self, key: bytes | None, queue: int | None) -> int:
        if queue is not None:
            if not 0 <= queue < self.queue_count:
                raise ConfigError(f"queue {queue} is out of range 0..{self.queue_count - 1}")
            return queue
        q = _MODULO.route([key], self.queue_count, self._none_queue)
        assert isinstance(q, int)  # one record, one queue
        return q

    def add(
        self,
        key: bytes | str | None,
        value: bytes | str | None,
        *,
        timestamp: int | None = None,
        headers: Headers = (),
        queue: int | None = None,
    ) -> list[Batch]:
        k = _as_bytes(key, "key")
        v = _as_bytes(value, "value")
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        q = self._queue_of(k, queue)
        size = len(k or b"") + len(v or b"")
        closed: list[Batch] = []
        slot = (q, k)
        records, used = self._open.get(slot, ([], 0))
        if records and used + size > self.max_bytes:
            closed.append(self._close(slot))
            # Closing a keyless batch moves keyless records to the next queue: this one
            # goes there too, or a later batch could overtake it.
            q = self._queue_of(k, queue)
            slot = (q, k)
            records, used = self._open.get(slot, ([], 0))
        records.append((ts, k, v, headers))
        self._open[slot] = (records, used + size)
        if len(records) >= self.max_messages or used + size >= self.max_bytes:
            closed.append(self._close(slot))
        return closed

    def _close(self, slot: tuple[int, bytes | None]) -> Batch:
        records, _ = self._open.pop(slot)
        queue, key = slot
        if key is None and queue == self._none_queue:
            self._none_queue = (self._none_queue + 1) % self.queue_count
        return Batch(queue, key, tuple(records))

    def drain(self) -> list[Batch]:
        """Close and return every open batch, oldest first."""
        return [self._close(slot) for slot in list(self._open)]


class KeyBasedBatchProducer:
    """Sends messages to ``topic`` in key-based batches (one ``append`` per batch).

    >>> from rstreams.runtime.queues import MemoryBroker
    >>> broker = MemoryBroker(); broker.create_topic("t", 1)
    >>> with KeyBasedBatchProducer(broker, "t") as p:
    ...     p.send("v1", key="a"); p.send("v2", key="b"); p.send("v3", key="a")
    >>> [(r.key, r.value) for r in broker.read("t", 0, 0)]
    [(b'a', b'v1'), (b'a', b'v3'), (b'b', b'v2')]
    """

    def __init__(
        self,
        broker: Broker,
        topic: str,
        *,
        max_messages: int = 1000,
        max_bytes: int = 128 * 1024,
    ) -> None:
        n = broker.queue_count(topic)
        if n is None:
            raise ConfigError(f"topic {topic!r} does not exist; create it first")
        self.broker = broker
        self.topic = topic
        self.batcher = KeyBasedBatcher(n, max_messages=max_messages, max_bytes=max_bytes)
        #: (batch, first offset) of every batch appended so far
        self.sent: list[tuple[Batch, int]] = []

    def send(
        self,
        value: bytes | str | None,
        key: bytes | str | None = None,
        *,
        timestamp: int | None = None,
        headers: Headers = (),
        queue: int | None = None,
    ) -> None:
        """Add a message; full batches are appended at once, the rest on :meth:`flush`."""
        for batch in self.batcher.add(
            key, value, timestamp=timestamp, headers=headers, queue=queue
        ):
            self._append(batch)

    def _append(self, batch: Batch) -> None:
        first = self.broker.append(self.topic, batch.queue, batch.records)
        self.sent.append((batch, first))

    def flush(self) -> None:
        for batch in self.batcher.drain():
            self._append(batch)

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> KeyBasedBatchProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
