"""Producer: buffers writes to topics and appends them to the broker in batches."""

from __future__ import annotations

from collections import defaultdict

from rstreams.runtime.queues.base import Headers
from rstreams.runtime.queues.memory import MemoryBroker

Pending = tuple[int, bytes | None, bytes | None, Headers]


class Producer:
    """Collects records per (topic, queue) and writes them at :meth:`flush`.

    Records reach the broker at flush (the task flushes at commit, and whenever a batch
    has been processed in the local engine), in the order they were sent per queue.
    """

    #: Whether the order of records across queues matters to this producer (the test
    #: driver replays records in production order); otherwise sends are grouped by queue.
    records_order = False

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self._pending: dict[tuple[str, int], list[Pending]] = defaultdict(list)

    def send(
        self,
        topic: str,
        queue: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
    ) -> None:
        self._pending[(topic, queue)].append((timestamp, key, value, headers))

    def send_many(self, topic: str, queue: int, items: list[Pending]) -> None:
        self._pending[(topic, queue)].extend(items)

    def queue_count(self, topic: str) -> int:
        n = self.broker.queue_count(topic)
        if n is None:
            raise KeyError(topic)
        return n

    def take(self) -> dict[tuple[str, int], list[Pending]]:
        """Hand over what is pending without writing it (a transaction writes it)."""
        pending, self._pending = self._pending, defaultdict(list)
        return dict(pending)

    def flush(self) -> list[tuple[str, int]]:
        """Append what is pending; returns the (topic, queue)s written to."""
        pending, self._pending = self._pending, defaultdict(list)
        for (topic, queue), items in pending.items():
            self.broker.append(topic, queue, items)
        return list(pending)
