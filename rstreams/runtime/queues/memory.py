"""In-memory broker: topics of queues held in lists. For the test driver and in-process runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rstreams.errors import ConfigError
from rstreams.runtime.queues._logformat import HEADER_SIZE, decode_columns
from rstreams.runtime.queues.base import LogRecord, RecordColumns


class MemoryQueue:
    """Records of one queue; ``base`` is the offset of ``records[0]`` (older ones purged)."""

    __slots__ = ("base", "records")

    def __init__(self) -> None:
        self.base = 0
        self.records: list[LogRecord] = []

    @property
    def end(self) -> int:
        return self.base + len(self.records)


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
        self.topics: dict[str, MemoryTopic] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}

    def create_topic(
        self, name: str, queues: int, *, compacted: bool = False, **options: object
    ) -> None:
        """Create a topic (idempotent). ``options`` of durable brokers (segment size,
        retention) mean nothing in memory and are ignored."""
        old = self.topics.get(name)
        if old is not None:
            if old.queue_count != queues:
                raise ConfigError(
                    f"topic {name!r} exists with {old.queue_count} queues; asked for {queues}"
                )
            return
        if queues < 1:
            raise ConfigError(f"topic {name!r} needs at least one queue; got {queues}")
        self.topics[name] = MemoryTopic(name, queues, compacted)

    def queue_count(self, name: str) -> int | None:
        t = self.topics.get(name)
        return None if t is None else t.queue_count

    def _queue(self, topic: str, queue: int) -> MemoryQueue:
        try:
            return self.topics[topic].queues[queue]
        except KeyError:
            raise ConfigError(f"topic {topic!r} does not exist") from None
        except IndexError:
            raise ConfigError(
                f"topic {topic!r} has no queue {queue} (it has {self.topics[topic].queue_count})"
            ) from None

    def append(
        self,
        topic: str,
        queue: int,
        records: Iterable[tuple[int, bytes | None, bytes | None, tuple]],
    ) -> int:
        """Append (timestamp, key, value, headers) tuples; returns the first new offset."""
        columns = list(zip(*records))
        if not columns:
            return self._queue(topic, queue).end
        if len(columns) != 4:
            raise TypeError(
                "records must be (timestamp, key, value, headers) tuples; "
                f"got {len(columns)} fields"
            )
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
        first = q.end
        q.records.extend(
            LogRecord.many(range(first, first + len(values)), timestamps, keys, values, headers)
        )
        return first

    def append_encoded(
        self, topic: str, queue: int, payload: bytes, count: int, max_ts: int
    ) -> int:
        """Append a batch encoded by ``_logformat.encode_batch`` (as the file log stores it)."""
        columns = decode_columns(memoryview(b"\0" * HEADER_SIZE + payload), 0, count, count - 1)
        return self.append_columns(
            topic, queue, columns.timestamps, columns.keys, columns.values, columns.headers
        )

    def read(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> list[LogRecord]:
        q = self._queue(topic, queue)
        if offset < q.base:
            raise ConfigError(
                f"offset {offset} of {topic}[{queue}] was purged; the queue starts at {q.base}"
            )
        i = offset - q.base
        return q.records[i:] if max_records is None else q.records[i : i + max_records]

    def read_columns(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> RecordColumns:
        return RecordColumns.from_records(self.read(topic, queue, offset, max_records))

    def end_offset(self, topic: str, queue: int) -> int:
        return self._queue(topic, queue).end

    def start_offset(self, topic: str, queue: int) -> int:
        return self._queue(topic, queue).base

    def purge(self, topic: str, queue: int, before: int) -> None:
        """Drop records below offset ``before`` (once every reader has committed past them)."""
        q = self._queue(topic, queue)
        n = min(before, q.end) - q.base
        if n > 0:
            del q.records[:n]
            q.base += n

    def flush(self) -> None:
        """Nothing to make durable in memory."""

    def close(self) -> None:
        pass

    def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        self.offsets[(group, topic, queue)] = offset

    def committed(self, group: str, topic: str, queue: int) -> int:
        return self.offsets.get((group, topic, queue), 0)
