"""Producer: buffers writes to topics and appends them to the broker in batches."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import chain

from rstreams.runtime.engine.operators.batch import gather
from rstreams.runtime.queues.base import Headers
from rstreams.runtime.queues.broker import Broker

Pending = tuple[int, bytes | None, bytes | None, Headers]
#: Records as columns: timestamps, keys, values, headers.
Columns = tuple[list[int], list[bytes | None], list[bytes | None], list[Headers]]


class Producer:
    """Collects records per (topic, queue) and writes them at :meth:`flush`.

    Records reach the broker at flush (the task flushes at commit, and whenever a batch
    has been processed in the local engine), in the order they were sent per queue.
    They are kept as columns, the way sinks produce them and the log encodes them.
    Every send is :meth:`send_columns` (or :meth:`send_routed`, which hands it one queue
    at a time): a subclass that overrides those sees every record.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._pending: dict[tuple[str, int], list[Columns]] = defaultdict(list)

    def send(
        self,
        topic: str,
        queue: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
    ) -> None:
        """One record (a control record, a dead letter)."""
        self.send_columns(topic, queue, [timestamp], [key], [value], [headers])

    def send_many(self, topic: str, queue: int, items: Sequence[Pending]) -> None:
        """Records as (timestamp, key, value, headers) tuples."""
        if items:
            ts, keys, values, headers = map(list, zip(*items))
            self.send_columns(topic, queue, ts, keys, values, headers)

    def send_columns(
        self,
        topic: str,
        queue: int,
        timestamps: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[Headers],
    ) -> None:
        """Records as columns of equal length (not copied: the caller lets go of them)."""
        if values:
            self._pending[(topic, queue)].append((timestamps, keys, values, headers))

    def send_routed(
        self,
        topic: str,
        queues: int | list[int],
        timestamps: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[Headers],
    ) -> None:
        """:meth:`send_columns` of records whose queues ``QueueMapper.route`` chose (one
        queue for all, or one per record): each queue's records, in their order."""
        if isinstance(queues, int):
            self.send_columns(topic, queues, timestamps, keys, values, headers)
            return
        rows_of: list[list[int]] = [[] for _ in range(max(queues) + 1)]
        appends = [r.append for r in rows_of]
        for i, q in enumerate(queues):
            appends[q](i)
        for q, idx in enumerate(rows_of):
            if idx:
                self.send_columns(
                    topic, q, gather(timestamps, idx), gather(keys, idx), gather(values, idx),
                    gather(headers, idx),
                )  # fmt: skip

    def queue_count(self, topic: str) -> int:
        n = self.broker.queue_count(topic)
        if n is None:
            raise KeyError(topic)
        return n

    def take(self) -> dict[tuple[str, int], Columns]:
        """Hand over what is pending without writing it (a transaction writes it)."""
        pending, self._pending = self._pending, defaultdict(list)
        return {key: _joined(chunks) for key, chunks in pending.items()}

    def flush(self) -> list[tuple[str, int]]:
        """Append what is pending; returns the (topic, queue)s written to."""
        pending, self._pending = self._pending, defaultdict(list)
        for (topic, queue), chunks in pending.items():
            self.broker.append_columns(topic, queue, *_joined(chunks))
        return list(pending)


def _joined(chunks: list[Columns]) -> Columns:
    if len(chunks) == 1:
        return chunks[0]
    ts, keys, values, headers = zip(*chunks)
    return (
        list(chain.from_iterable(ts)),
        list(chain.from_iterable(keys)),
        list(chain.from_iterable(values)),
        list(chain.from_iterable(headers)),
    )
