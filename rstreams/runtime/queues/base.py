"""What every broker stores: records with dense per-queue offsets."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from functools import partial
from itertools import chain, pairwise
from operator import itemgetter
from typing import Any

# (where it always was: the rule itself lives with the queue mappers)
from rstreams.runtime.queues.mapper import queue_for_key as queue_for_key

Headers = tuple[tuple[str, bytes], ...]


class LogRecord(tuple):
    """One record as stored in a queue: bytes key/value plus metadata.

    A tuple ``(offset, timestamp, key, value, headers)`` with named fields: brokers
    build thousands at once at C speed (:meth:`many`), and readers turn a list of them
    into columns with ``zip(*records)``.

    >>> r = LogRecord(7, 1000, b"k", b"v")
    >>> r.offset, r.key, r.headers
    (7, b'k', ())
    >>> offsets, timestamps, keys, values, headers = zip(*LogRecord.many([1, 2], [0, 0],
    ...     [None, b"a"], [b"x", b"y"], [(), ()]))
    >>> offsets, keys
    ((1, 2), (None, b'a'))
    """

    __slots__ = ()

    def __new__(
        cls,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
    ) -> LogRecord:
        return tuple.__new__(cls, (offset, timestamp, key, value, headers))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    offset: int = property(itemgetter(0))  # type: ignore[assignment]
    timestamp: int = property(itemgetter(1))  # type: ignore[assignment]
    key: bytes | None = property(itemgetter(2))  # type: ignore[assignment]
    value: bytes | None = property(itemgetter(3))  # type: ignore[assignment]
    headers: Headers = property(itemgetter(4))  # type: ignore[assignment]

    @staticmethod
    def many(
        offsets: Iterable[int],
        timestamps: Iterable[int],
        keys: Iterable[bytes | None],
        values: Iterable[bytes | None],
        headers: Iterable[Headers],
    ) -> list[LogRecord]:
        """Records from columns, with no Python call per record."""
        return list(map(_new_record, zip(offsets, timestamps, keys, values, headers)))

    @staticmethod
    def wrap(rows: Iterable[tuple[Any, ...]]) -> list[LogRecord]:
        """Records from plain ``(offset, timestamp, key, value, headers)`` tuples."""
        return list(map(_new_record, rows))

    def __repr__(self) -> str:
        return (
            f"LogRecord(offset={self.offset}, ts={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r:.60})"
        )


_new_record = partial(tuple.__new__, LogRecord)


class RecordColumns:
    """Records of one queue as columns: what brokers hand to the engine.

    ``offsets`` is a ``range`` when they are dense (the usual case), else a sequence;
    the other columns are sequences of the same length.

    >>> c = RecordColumns(range(5, 8), [0, 0, 1], [None] * 3, [b"a", b"b", b"c"], [()] * 3)
    >>> len(c), c.last_offset, c.slice(1, 3).values
    (3, 7, [b'b', b'c'])
    >>> [r.offset for r in c.records()]
    [5, 6, 7]
    """

    __slots__ = ("headers", "keys", "offsets", "timestamps", "values")

    def __init__(
        self,
        offsets: Sequence[int],
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[Headers],
    ) -> None:
        self.offsets = offsets
        self.timestamps = timestamps
        self.keys = keys
        self.values = values
        self.headers = headers

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def last_offset(self) -> int:
        return self.offsets[-1]

    def slice(self, start: int, stop: int) -> RecordColumns:
        return RecordColumns(
            self.offsets[start:stop],
            self.timestamps[start:stop],
            self.keys[start:stop],
            self.values[start:stop],
            self.headers[start:stop],
        )

    def index_of(self, offset: int) -> int:
        """Position of the first record with an offset >= ``offset``."""
        offsets = self.offsets
        if isinstance(offsets, range):
            return min(max(offset - offsets.start, 0), len(offsets))
        return bisect.bisect_left(offsets, offset)

    def records(self) -> list[LogRecord]:
        return LogRecord.many(self.offsets, self.timestamps, self.keys, self.values, self.headers)

    @classmethod
    def from_records(cls, records: Sequence[tuple[Any, ...]]) -> RecordColumns:
        if not records:
            return cls(range(0), [], [], [], [])
        offsets, timestamps, keys, values, headers = zip(*records)
        return cls(offsets, timestamps, keys, values, headers)

    @classmethod
    def concat(cls, parts: Sequence[RecordColumns]) -> RecordColumns:
        """One object for several consecutive parts (the part itself when one)."""
        parts = [p for p in parts if len(p)]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls(range(0), [], [], [], [])
        offsets: Sequence[int]
        if all(isinstance(p.offsets, range) for p in parts) and all(
            a.last_offset + 1 == b.offsets[0] for a, b in pairwise(parts)
        ):
            offsets = range(parts[0].offsets[0], parts[-1].last_offset + 1)
        else:
            offsets = list(chain.from_iterable(p.offsets for p in parts))
        return cls(
            offsets,
            list(chain.from_iterable(p.timestamps for p in parts)),
            list(chain.from_iterable(p.keys for p in parts)),
            list(chain.from_iterable(p.values for p in parts)),
            list(chain.from_iterable(p.headers for p in parts)),
        )

    def __repr__(self) -> str:
        span = f"{self.offsets[0]}..{self.last_offset}" if len(self) else "empty"
        return f"<RecordColumns {len(self)} records, offsets {span}>"
