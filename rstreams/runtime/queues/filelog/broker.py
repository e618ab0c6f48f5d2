""":class:`FileBroker`: the file log's coordinator, implementing
:class:`~rstreams.runtime.queues.broker.Broker` over topics (:mod:`.topic`), queues
(:mod:`.queue`), retention (:mod:`.retention`), compaction (:mod:`.cleaner`) and group
offsets (:mod:`rstreams.runtime.queues.offsets`). The package docs describe the layout,
the ``fsync`` modes, concurrency and limits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote

from rstreams.errors import ConfigError
from rstreams.runtime.queues._files import FileLock, _encode_name, _makedirs, in_parallel
from rstreams.runtime.queues._logformat import encode_batch, encode_column_batch
from rstreams.runtime.queues.base import LogRecord, RecordColumns
from rstreams.runtime.queues.broker import (
    check_create_topic,
    check_retention,
    not_compacted,
    unknown_queue,
    unknown_topic,
)
from rstreams.runtime.queues.filelog import cleaner, retention
from rstreams.runtime.queues.filelog.queue import Queue
from rstreams.runtime.queues.filelog.topic import Topic
from rstreams.runtime.queues.offsets import FileGroupOffsets

FSYNC_POLICIES = ("always", "commit", "never")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_TOMBSTONE_RETENTION_MS = 24 * 60 * 60 * 1000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class FileBroker:
    """Topics, queues and consumer-group offsets in files under ``root``.

    ``fsync`` is ``"commit"`` (default), ``"always"`` or ``"never"`` (see the package
    docs). ``segment_bytes`` and ``index_interval_bytes`` are the defaults for topics this
    broker creates; a topic keeps the values it was created with (in its ``meta.json``).
    """

    def __init__(
        self,
        root: str | Path,
        *,
        fsync: str = "commit",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}; got {fsync!r}")
        if segment_bytes < 1 or index_interval_bytes < 1:
            raise ConfigError(
                f"segment_bytes and index_interval_bytes must be positive; got "
                f"{segment_bytes} and {index_interval_bytes}"
            )
        self.root = Path(root)
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self._sync = fsync != "never"
        self._topics_dir = self.root / "topics"
        _makedirs(self._topics_dir, sync=self._sync)
        self._offsets = FileGroupOffsets(self.root / "groups", sync=self._sync)
        self._topics: dict[str, Topic] = {}
        self._lock = threading.RLock()
        self._create_lock = FileLock(self._topics_dir / ".create.lock")
        self._appended: set[Queue] = set()  # queues appended to since the last flush
        self._appended_lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"FileBroker({str(self.root)!r}, fsync={self.fsync!r})"

    def __enter__(self) -> FileBroker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- topics -------------------------------------------------------------------------

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
        """Create topic ``name`` with ``queues`` queues; a no-op if it exists with as many.

        ``retention_ms``/``retention_bytes`` bound a normal topic's closed segments by age
        (largest record timestamp) and by total size; :meth:`enforce_retention` applies
        them. ``compacted`` topics are cleaned by :meth:`compact` instead.
        """
        self._check_open()
        old = self._topic(name)
        if not check_create_topic(name, queues, None if old is None else old.queue_count):
            return
        check_retention(retention_ms, retention_bytes)
        if segment_bytes is not None and segment_bytes < 1:
            raise ConfigError(f"segment_bytes must be positive; got {segment_bytes}")
        with self._lock, self._create_lock:
            old = self._topic(name)
            if old is None:
                options = {  # (in this order in meta.json)
                    "queues": queues,
                    "compacted": compacted,
                    "retention_ms": retention_ms,
                    "retention_bytes": retention_bytes,
                    "segment_bytes": segment_bytes or self.segment_bytes,
                    "index_interval_bytes": self.index_interval_bytes,
                }
                tdir = self._topics_dir / _encode_name(name)
                self._topics[name] = Topic.create(name, tdir, options, sync=self._sync)
                return
        check_create_topic(name, queues, old.queue_count)

    def _topic(self, name: str) -> Topic | None:
        t = self._topics.get(name)
        if t is None:
            t = Topic.load(name, self._topics_dir / _encode_name(name), self.root)
            if t is None:
                return None
            with self._lock:
                t = self._topics.setdefault(name, t)
        return t

    def queue_count(self, name: str) -> int | None:
        t = self._topic(name)
        return None if t is None else t.queue_count

    def topics(self) -> dict[str, int]:
        """Every topic under the root (created by any process) and its queue count."""
        self._check_open()
        out = {}
        for d in sorted(self._topics_dir.iterdir()):
            if d.name.startswith(".") or not (d / "meta.json").exists():
                continue
            t = self._topic(unquote(d.name))
            if t is not None:
                out[t.name] = t.queue_count
        return out

    # -- queues -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"{self!r} is closed")

    def _queue(self, topic: str, queue: int) -> Queue:
        self._check_open()
        t = self._topic(topic)
        if t is None:
            raise unknown_topic(topic)
        if not 0 <= queue < t.queue_count:
            raise unknown_queue(topic, queue, t.queue_count)
        q = t.queues[queue]
        if q is None:
            with self._lock:
                q = t.queues[queue]
                if q is None:
                    q = Queue(t, queue, self.fsync, self._on_append)
                    q.open(self._offsets.committed_by(t.name, queue))
                    t.queues[queue] = q
        return q

    def _on_append(self, q: Queue) -> None:
        with self._appended_lock:
            self._appended.add(q)

    # -- append -------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        queue: int,
        records: Iterable[tuple[int, bytes | None, bytes | None, tuple]],
    ) -> int:
        """Append (timestamp, key, value, headers) tuples as one batch; the first new offset."""
        return self._append_batch(topic, queue, encode_batch(records))

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
        return self._append_batch(
            topic, queue, encode_column_batch(timestamps, keys, values, headers)
        )

    def _append_batch(self, topic: str, queue: int, batch: tuple[bytes, int, int] | None) -> int:
        if batch is None:  # nothing to append
            return self.end_offset(topic, queue)
        return self.append_encoded(topic, queue, *batch)

    def append_encoded(
        self, topic: str, queue: int, payload: bytes, count: int, max_ts: int
    ) -> int:
        """Append a batch already encoded by ``_logformat.encode_batch``; the first new offset."""
        return self._queue(topic, queue).append(payload, count, max_ts)

    # -- read ---------------------------------------------------------------------------

    def read(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> list[LogRecord]:
        """Records with offsets >= ``offset`` (dense, except after compaction), oldest first.

        At most ``max_records`` of them; ``[]`` at the end of the queue.
        """
        return self.read_columns(topic, queue, offset, max_records).records()

    def read_columns(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> RecordColumns:
        """:meth:`read` as columns: no object per record (what the engine reads)."""
        q = self._queue(topic, queue)
        try:
            return q.reader.read_columns(offset, max_records)
        except FileNotFoundError:
            # Maintenance in another process kept replacing segments as we relisted
            # them: read once more while holding it off (it takes this lock to swap).
            with q.maint_lock:  # taken before the mutex, as maintenance does
                with q.mutex:
                    q.relist(locked=False)
                return q.reader.read_columns(offset, max_records)

    def end_offset(self, topic: str, queue: int) -> int:
        q = self._queue(topic, queue)
        with q.mutex:
            q.refresh()
            return q.end

    def end_offsets(self, queues: Iterable[tuple[str, int]]) -> list[int]:
        """:meth:`end_offset` of each queue (local files: no round trip to save)."""
        return [self.end_offset(topic, queue) for topic, queue in queues]

    def start_offset(self, topic: str, queue: int) -> int:
        q = self._queue(topic, queue)
        with q.mutex:
            q.refresh()
            return q.start

    # -- purge, retention, compaction ---------------------------------------------------

    def purge(self, topic: str, queue: int, before: int) -> None:
        """Drop records below offset ``before`` (once every reader has committed past them).

        The start offset moves to ``min(before, end)`` at once (reads below it raise
        :class:`ConfigError`); the segments entirely below it are deleted. The active
        segment is never deleted.
        """
        retention.purge(self._queue(topic, queue), before)

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete old closed segments of normal topics by ``retention_ms``/``retention_bytes``.

        A segment goes when all its records are older than ``retention_ms`` (by the largest
        record timestamp) or when the queue stays at least ``retention_bytes`` big without
        it; oldest first, stopping at the first segment that stays. Returns the number of
        segments deleted.
        """
        now = _now_ms() if now_ms is None else now_ms
        deleted = 0
        for name in self.topics():
            t = self._topic(name)
            if t is None or t.compacted or (t.retention_ms is None and t.retention_bytes is None):
                continue
            for i in range(t.queue_count):
                deleted += retention.retain(self._queue(name, i), now)
        return deleted

    def compact(
        self,
        topic: str,
        queue: int,
        *,
        tombstone_retention_ms: int = DEFAULT_TOMBSTONE_RETENTION_MS,
        now_ms: int | None = None,
    ) -> int:
        """Keep only the latest record per key in the closed segments of a compacted topic.

        Offsets are kept, so they become sparse: ``read(offset)`` returns records with
        offsets >= ``offset``. Tombstones (value None) older than ``tombstone_retention_ms``
        (by record timestamp) are dropped once they are the latest for their key; records
        without a key are kept. Small neighbouring segments are merged. The new segments
        are written aside and renamed into place, so readers are never blocked and never
        see a half-compacted segment. Returns the number of records removed.
        """
        q = self._queue(topic, queue)
        if not q.topic.compacted:
            raise not_compacted(topic)
        horizon = (_now_ms() if now_ms is None else now_ms) - tombstone_retention_ms
        return cleaner.compact(q, horizon)

    # -- groups (stored by FileGroupOffsets) ---------------------------------------------

    def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        """Record ``group``'s position in a queue, after making appended data durable."""
        self._check_open()
        self.flush()
        self._offsets.commit(group, topic, queue, offset)

    def commit_many(self, commits: Sequence[tuple[str, str, int, int]]) -> None:
        """:meth:`commit` of each (group, topic, queue, offset), the files synced
        together; every one is durable when this returns."""
        self._check_open()
        if not commits:
            return
        self.flush()
        self._offsets.commit_many(commits)

    def committed(self, group: str, topic: str, queue: int) -> int:
        """The offset ``group`` committed for the queue (0 if none)."""
        self._check_open()
        return self._offsets.committed(group, topic, queue)

    def groups(self) -> list[str]:
        """Every group with committed offsets."""
        self._check_open()
        return self._offsets.groups()

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """{(topic, queue): offset} of everything ``group`` committed."""
        self._check_open()
        return self._offsets.group_offsets(group)

    def _read_offset_file(self, path: Path) -> dict[str, Any]:
        """A committed-offset file, checked: a damaged one is an error, never offset 0."""
        return self._offsets.read_file(path)

    # -- durability and lifetime --------------------------------------------------------

    def flush(self) -> None:
        """Make what this broker appended durable (fsync), per the ``fsync`` policy."""
        with self._appended_lock:
            queues, self._appended = self._appended, set()
        try:
            # Every queue at once: their fsyncs are committed together (see in_parallel).
            in_parallel([q.flush for q in queues])
        except BaseException:
            # Not durable: the next flush tries all of it again (each queue keeps what
            # it still has to do), and never says durable what this one could not.
            with self._appended_lock:
                self._appended |= queues
            raise

    def close(self) -> None:
        """Flush, then release every file; the broker can no longer be used."""
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._closed = True
            for t in self._topics.values():
                for q in t.queues:
                    if q is not None:
                        q.close()
            self._create_lock.close()
