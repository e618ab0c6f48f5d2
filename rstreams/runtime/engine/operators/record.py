"""The record that flows between processors."""

from __future__ import annotations

import time
from typing import Any

from rstreams.runtime.queues.base import Headers
from rstreams.userfn import as_timestamp as as_timestamp  # re-exported: its old home


def wall_clock_ms() -> int:
    """Now, in epoch milliseconds: the time a record without an event time is given."""
    return time.time_ns() // 1_000_000


class Record:
    """A deserialized record plus where it came from (source topic/queue/offset).

    Records are never mutated once forwarded (a parent may fan the same record out to
    several children).
    """

    __slots__ = ("headers", "key", "offset", "queue", "timestamp", "topic", "value")

    def __init__(
        self,
        key: Any,
        value: Any,
        timestamp: int,
        headers: Headers,
        topic: str,
        queue: int,
        offset: int,
    ) -> None:
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = headers
        self.topic = topic
        self.queue = queue
        self.offset = offset

    def __repr__(self) -> str:
        return (
            f"Record(key={self.key!r}, value={self.value!r:.80}, timestamp={self.timestamp}, "
            f"from={self.topic}[{self.queue}]@{self.offset})"
        )
