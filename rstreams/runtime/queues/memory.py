"""In-memory broker: topics of queues held in lists. For the test driver and in-process runs."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from rstreams.runtime.queues._logformat import check_record_columns, decode_batch, record_columns
from rstreams.runtime.queues.base import LogRecord, RecordColumns
from rstreams.runtime.queues.broker import (
    check_create_topic,
    not_compacted,
    purged,
    unknown_queue,
    unknown_topic,
)
from rstreams.runtime.queues.offsets import MemoryGroupOffsets, check_name


class MemoryQueue:
    """Records of one queue; ``base`` is the offset of the first one kept (older ones
    purged).

    Records appended one at a time (the test driver's) are kept as plain ``(offset,
    timestamp, key, value, headers)`` tuples and made :class:`LogRecord` s when read: the
    garbage collector stops tracking a plain tuple of bytes and ints, not a tuple
    subclass, and a test driver's broker keeps every record (each full collection would
    walk them all again). Records appended as columns (a chunk of input, a batch of a
    shuffle) stay in ``chunks``, after the tuples, as the columns they came in until
    something wants rows: a read of columns gets them back as they are, with no tuple
    made for each record and taken apart again.
    """

    __slots__ = ("base", "chunks", "in_chunks", "records")

    def __init__(self) -> None:
        self.base = 0
        self.records: list[tuple[int, int, bytes | None, bytes | None, tuple]] = []
        self.chunks: deque[RecordColumns] = deque()  # (never an empty one)
        self.in_chunks = 0

    @property
    def end(self) -> int:
        return self.base + len(self.records) + self.in_chunks

    def rows(self) -> list[tuple[int, int, bytes | None, bytes | None, tuple]]:
        """Every record kept as a tuple (the chunks made rows first)."""
        if self.chunks:
            extend = self.records.extend
            for c in self.chunks:
                extend(zip(c.offsets, c.timestamps, c.keys, c.values, c.headers))
            self.chunks.clear()
            self.in_chunks = 0
        return self.records

    def columns(self, offset: int, want: int) -> RecordColumns | None:
        """Records ``[offset, offset + want)`` when all of them are in chunks (None when
        some are tuples)."""
        if offset < self.base + len(self.records):
            return None
        stop = offset + want
        parts: list[RecordColumns] = []
        for c in self.chunks:
            lo = c.offsets[0]
            hi = lo + len(c)
            if hi <= offset:
                continue
            if lo >= stop:
                break
            a, b = max(offset, lo) - lo, min(stop, hi) - lo
            parts.append(c if a == 0 and b == len(c) else c.slice(a, b))
        return RecordColumns.concat(parts)

    def purge(self, n: int) -> None:
        """Drop the first ``n`` records (at most those kept)."""
        rows = min(n, len(self.records))
        del self.records[:rows]
        self.base += rows
        n -= rows
        chunks = self.chunks
        while n > 0 and chunks:
            c = chunks[0]
            k = min(n, len(c))
            if k == len(c):
                chunks.popleft()
            else:
                chunks[0] = c.slice(k, len(c))
            self.in_chunks -= k
            self.base += k
            n -= k


class MemoryTopic:
    __slots__ = ("compacted", "name", "queues")

    def __init__(self, name: str, queue_count: int, compacted: bool = False) -> None:
        self.name = name
        self.queues = [MemoryQueue() for _ in range(queue_count)]
        self.compacted = compacted

    @property
    def queue_count(self) -> int:
        return len(self.queues)


class MemoryBroker:
    """Topics, queues and committed consumer offsets, all in process memory.

    Offsets are list indexes, so they are dense from 0.

    >>> b = MemoryBroker()
    >>> b.create_topic("t", 2)
    >>> b.append("t", 1, [(0, b"k", b"v", ())])
    0
    >>> [r.value for r in b.read("t", 1, 0)]
    [b'v']
    """

    def __init__(self) -> None:
        self._topics: dict[str, MemoryTopic] = {}
        # (topic, queue) -> its queue, found once (topics are never deleted): the test
        # driver appends record by record.
        self._queues: dict[tuple[str, int], MemoryQueue] = {}
        self._offsets = MemoryGroupOffsets()

    def create_topic(
        self,
        name: str,
        queues: int,
        *,
        compacted: bool = False,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        segment_bytes: int | None = None,
    ) -> None:
        """Create a topic (idempotent). Segment size and retention, options of the file
        log, mean nothing in memory and are ignored."""
        old = self._topics.get(name)
        if old is None:
            check_name(name)
        if check_create_topic(name, queues, None if old is None else old.queue_count):
            self._topics[name] = MemoryTopic(name, queues, compacted)

    def queue_count(self, name: str) -> int | None:
        t = self._topics.get(name)
        return None if t is None else t.queue_count

    def topics(self) -> dict[str, int]:
        """Every topic and its queue count."""
        return {name: t.queue_count for name, t in sorted(self._topics.items())}

    def _queue(self, topic: str, queue: int) -> MemoryQueue:
        q = self._queues.get((topic, queue))
        if q is not None:
            return q
        try:
            if queue < 0:
                raise IndexError(queue)
            q = self._queues[(topic, queue)] = self._topics[topic].queues[queue]
            return q
        except KeyError:
            raise unknown_topic(topic) from None
        except IndexError:
            raise unknown_queue(topic, queue, self._topics[topic].queue_count) from None

    def queues_of(self, topic: str) -> list[MemoryQueue]:
        """The queues of ``topic``, for a producer that appends to them itself (the test
        driver's, record by record: see :meth:`append_one` for what it must do)."""
        try:
            return self._topics[topic].queues
        except KeyError:
            raise unknown_topic(topic) from None

    def append(
        self,
        topic: str,
        queue: int,
        records: Iterable[tuple[int, bytes | None, bytes | None, tuple]],
    ) -> int:
        """Append (timestamp, key, value, headers) tuples; returns the first new offset."""
        columns = record_columns(records)
        if columns is None:
            return self._queue(topic, queue).end
        return self.append_columns(topic, queue, *columns)

    def append_columns(
        self,
        topic: str,
        queue: int,
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[tuple],
    ) -> int:
        """:meth:`append` of records given as columns; the first new offset."""
        q = self._queue(topic, queue)
        check_record_columns(timestamps, keys, values, headers)  # as the file log checks
        first, n = q.end, len(values)
        if n:  # (copies of the columns: the caller may reuse its lists)
            q.chunks.append(
                RecordColumns(
                    range(first, first + n), list(timestamps), list(keys), list(values),
                    list(headers),
                )
            )  # fmt: skip
            q.in_chunks += n
        return first

    def append_one(
        self,
        topic: str,
        queue: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple = (),
    ) -> int:
        """:meth:`append` of a single record, with the same checks (the test driver
        appends record by record); its offset."""
        q = self._queues.get((topic, queue))  # _queue(), without its call
        if q is None:
            q = self._queue(topic, queue)
        if type(timestamp) is not int:  # as append_columns checks
            raise TypeError(f"record timestamps must be int milliseconds; got {timestamp!r}")
        records = q.rows() if q.chunks else q.records
        offset = q.base + len(records)
        records.append((offset, timestamp, key, value, headers))
        return offset

    def append_encoded(
        self, topic: str, queue: int, payload: bytes, count: int, max_ts: int
    ) -> int:
        """Append a batch encoded by ``_logformat.encode_batch`` (as the file log stores it)."""
        columns = decode_batch(payload, count)
        return self.append_columns(
            topic, queue, columns.timestamps, columns.keys, columns.values, columns.headers
        )

    def read(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> list[LogRecord]:
        return LogRecord.wrap(self._stored(topic, queue, offset, max_records))

    def _stored(
        self, topic: str, queue: int, offset: int, max_records: int | None
    ) -> list[tuple[int, int, bytes | None, bytes | None, tuple]]:
        q = self._queue(topic, queue)
        if offset < q.base:
            raise purged(topic, queue, offset, q.base)
        i = offset - q.base
        records = q.rows()
        if max_records is None:
            return records[i:]
        return records[i : i + max_records] if max_records > 0 else []

    def read_columns(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> RecordColumns:
        q = self._queue(topic, queue)
        if offset >= q.base:
            want = q.end - offset if max_records is None else min(q.end - offset, max_records)
            columns = q.columns(offset, max(want, 0))
            if columns is not None:
                return columns
        return RecordColumns.from_records(self._stored(topic, queue, offset, max_records))

    def end_offset(self, topic: str, queue: int) -> int:
        return self._queue(topic, queue).end

    def end_offsets(self, queues: Iterable[tuple[str, int]]) -> list[int]:
        return [self._queue(t, q).end for t, q in queues]

    def start_offset(self, topic: str, queue: int) -> int:
        return self._queue(topic, queue).base

    def purge(self, topic: str, queue: int, before: int) -> None:
        """Drop records below offset ``before`` (once every reader has committed past them)."""
        q = self._queue(topic, queue)
        n = min(before, q.end) - q.base
        if n > 0:
            q.purge(n)

    def compact(self, topic: str, queue: int) -> int:
        """Nothing to do: memory holds no closed segments to clean (0 records removed).

        Checks its arguments like the file log does."""
        self._queue(topic, queue)
        if not self._topics[topic].compacted:
            raise not_compacted(topic)
        return 0

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Nothing to do: memory has no segments to delete (0 deleted)."""
        return 0

    def flush(self) -> None:
        """Nothing to make durable in memory."""

    def close(self) -> None:
        pass

    # -- groups (see MemoryGroupOffsets) ---------------------------------------------

    def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        self._offsets.commit(group, topic, queue, offset)

    def commit_many(self, commits: Sequence[tuple[str, str, int, int]]) -> None:
        self._offsets.commit_many(commits)

    def committed(self, group: str, topic: str, queue: int) -> int:
        return self._offsets.committed(group, topic, queue)

    def groups(self) -> list[str]:
        return self._offsets.groups()

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        return self._offsets.group_offsets(group)
