"""What every broker stores: records with dense per-queue offsets."""

from __future__ import annotations

import mmh3

Headers = tuple[tuple[str, bytes], ...]


class LogRecord:
    """One record as stored in a queue: bytes key/value plus metadata."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self) -> str:
        return (
            f"LogRecord(offset={self.offset}, ts={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r:.60})"
        )


def queue_for_key(key: bytes, queues: int) -> int:
    """The queue a serialized key goes to: unsigned 32-bit Murmur3 (seed 0) modulo count.

    >>> queue_for_key(b"hello", 8) == queue_for_key(b"hello", 8) < 8
    True
    """
    return mmh3.hash(key, 0, False) % queues
