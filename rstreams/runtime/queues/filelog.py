"""Durable, file-backed log broker: the embedded runtime's topics on local disk.

:class:`FileBroker` implements :class:`~rstreams.runtime.queues.broker.Broker` (topics of N
queues, dense per-queue offsets, consumer-group offsets) and keeps everything in files
under one root directory, so a job survives restarts and several worker processes
can share the log.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as root, FileBroker(root) as b:
...     b.create_topic("t", 2)
...     b.append("t", 1, [(0, b"k", b"v", ()), (1, None, None, (("h", b"x"),))])
...     [(r.offset, r.key, r.value, r.headers) for r in b.read("t", 1, 0)]
...     b.commit("g", "t", 1, 2)
...     b.committed("g", "t", 1), b.group_offsets("g")
0
[(0, b'k', b'v', ()), (1, None, None, (('h', b'x'),))]
(2, {('t', 1): 2})

Layout under ``root``::

    topics/<topic>/meta.json                 {"name", "queues", "compacted", retention...}
    topics/<topic>/<queue>/<base:020d>.log   segments: record-batch frames
    topics/<topic>/<queue>/<base:020d>.index sparse index (offset -> position), rebuildable
    topics/<topic>/<queue>/start-offset      logical start offset after purge ("N crc32")
    topics/<topic>/<queue>/durable-point     how far the queue is known whole and synced
    topics/<topic>/<queue>/lock, maint.lock  flock files (appends; purge/retention/compaction)
    groups/<group>/<topic>/<queue>.json      {"group", "topic", "queue", "offset", "crc"}
                                             (see rstreams.runtime.queues.offsets)

Topic and group names that are not plain ``[A-Za-z0-9_.-]`` (or start with a dot) are
percent-encoded in paths; the files hold the real names. The frame and index formats are
documented in :mod:`rstreams.runtime.queues._logformat`: one ``append`` call is one frame
with a crc32 over its header and payload.

Durability (``fsync``):

``"commit"`` (default)
    Data is fsync-ed by :meth:`FileBroker.flush` and by :meth:`FileBroker.commit` *before*
    the offset is recorded, and a segment is fsync-ed when it is rolled. Nothing appended
    before the last ``flush``/``commit`` that returned is lost by a crash of the process
    or of the machine, and a recorded offset never points past durable data.
``"always"``
    Every ``append`` is fsync-ed before it returns: nothing that was appended is lost.
``"never"``
    No fsync: a *process* crash loses nothing (appends go straight to the OS with
    ``pwrite``), a machine crash may lose recent appends and offsets.

In every mode committed offsets are written to a temporary file and renamed into place, so
a crash never leaves a half-written offset; and on the first access to a queue its last
segment is checked from the last index entry on: a torn or corrupt final frame (short
write, bad crc, garbage) is truncated away with a WARNING. A damaged frame followed by valid
frames is never skipped: reading it raises :class:`CorruptLogError` naming the topic,
queue, segment file and byte position.

Concurrency: any number of threads and processes may append to and read the same queue.
Appends are serialized per queue by ``flock`` on the queue's ``lock`` file; a writer first
catches up with frames and segments other processes wrote, so offsets stay dense and
unique. Readers take no lock: they see frames only up to the last whole, crc-valid one, so a
frame still being written is simply not visible yet. Purge, retention and compaction
serialize on ``maint.lock`` and only delete or atomically replace *closed* segments;
readers keep reading files they have open and pick up the new files when the queue
directory changes. Each committed offset is its own file, so processes committing
different queues of one group never overwrite each other.

Limits: a queue in use holds 2 file descriptors (active segment, lock file) plus up to 4
of closed segments being read, so thousands of queues need a raised ``ulimit -n``.
Compaction keeps a dict of every distinct key of the queue in memory. A purge by another
process shows here at the next refresh (end of the known log, ``start_offset``,
``end_offset``); until then files this broker has open still serve their records.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import os
import re
import sys
import threading
import time
import zlib
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote

from rstreams.errors import ConfigError
from rstreams.runtime.faults import POINTS, maybe_fail
from rstreams.runtime.queues._files import (
    CorruptLogError,
    _atomic_write,
    _encode_name,
    _fsync_dir,
    _makedirs,
    _write_all,
    with_path,
)
from rstreams.runtime.queues._logformat import (
    FrameError,
    ReadBuffer,
    SparseIndex,
    build_frame,
    decode_columns,
    decode_frame,
    encode_batch,
    encode_column_batch,
    encode_records,
    find_frame_after,
    frame_crc_ok,
    iter_frames,
    read_header,
)
from rstreams.runtime.queues.base import LogRecord, RecordColumns
from rstreams.runtime.queues.offsets import FileGroupOffsets

log = logging.getLogger(__name__)

__all__ = ["CorruptLogError", "FileBroker"]

FSYNC_POLICIES = ("always", "commit", "never")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_TOMBSTONE_RETENTION_MS = 24 * 60 * 60 * 1000
_READ_BLOCK = 256 * 1024
_MAX_OPEN_CLOSED_SEGMENTS = 4  # per queue, besides the active segment
_RACY_NS = 1_000_000_000  # a directory changed this recently may change again unseen
DURABLE_FILE = "durable-point"  # "<segment base> <bytes> <end offset> <crc32>"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_fdatasync = getattr(os, "fdatasync", os.fsync)
_generations = itertools.count(1)  # tells apart every file a segment object opens


def _sync_segment(seg: _Segment) -> None:
    """fdatasync a segment; an error names its file."""
    try:
        maybe_fail("log-sync", seg.path)
        _fdatasync(seg.fd)
    except OSError as e:
        raise with_path(e, seg.path) from None


def _corrupt(
    q: _Queue, path: str | Path, position: int | None, reason: str, offset: int | None = None
) -> CorruptLogError:
    return CorruptLogError(
        q.topic.name, q.number, str(path), position, reason, offset=offset,
        root=q.topic.dir.parent.parent,
    )  # fmt: skip


def parse_durable(text: str) -> tuple[int, int, int]:
    """(segment base, bytes, end offset) of a durable-point file; ValueError if damaged."""
    seg, size, end, crc = (int(x) for x in text.split())
    if zlib.crc32(f"{seg} {size} {end}".encode()) != crc or min(seg, size, end) < 0:
        raise ValueError("checksum mismatch")
    return seg, size, end


def format_durable(seg: int, size: int, end: int) -> bytes:
    text = f"{seg} {size} {end}"
    return f"{text} {zlib.crc32(text.encode())}\n".encode()


def below_durable(mark: tuple[int, int, int] | None, base: int, pos: int) -> bool:
    """Whether byte ``pos`` of segment ``base`` lies below the durable point ``mark``
    (so a bad frame there is damage, not a torn write)."""
    return mark is not None and (mark[0] > base or (mark[0] == base and pos < mark[1]))


def parse_start(text: str) -> int:
    """The offset in a start-offset file: ``"<offset> <crc32>"``, or a bare offset as
    written before the crc; ValueError if damaged."""
    parts = [int(x) for x in text.split()]
    if len(parts) == 2 and zlib.crc32(str(parts[0]).encode()) != parts[1]:
        raise ValueError("checksum mismatch")
    if len(parts) not in (1, 2) or parts[0] < 0:
        raise ValueError(f"{text.strip()!r}")
    return parts[0]


def format_start(start: int) -> bytes:
    return f"{start} {zlib.crc32(str(start).encode())}\n".encode()


def _meta_crc(meta: dict[str, Any]) -> int:
    body = {k: v for k, v in meta.items() if k != "crc"}
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _FileLock:
    """Exclusive between threads (RLock) and processes (flock); re-entrant in a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.RLock()
        self._fd = -1
        self._pid = -1
        self._depth = 0

    def __enter__(self) -> _FileLock:
        self._mutex.acquire()
        if self._depth == 0:
            try:
                if self._fd < 0 or self._pid != os.getpid():  # a forked child needs its own
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                    self._pid = os.getpid()
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            except BaseException:
                self._mutex.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._mutex.release()

    def close(self) -> None:
        with self._mutex:
            if self._fd >= 0 and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = -1


class _Segment:
    """One ``.log`` file of a queue and what this process knows of it.

    For the active (last) segment ``size`` is the end of the last whole, crc-valid frame
    and ``next_offset`` the offset after it. A closed segment's state (fd, size, index) is
    loaded together on first read and dropped together, so a file swapped in by compaction
    is never read through the index of the file it replaced.
    """

    __slots__ = (
        "active",
        "base",
        "dirty",
        "fd",
        "gen",
        "ident",
        "index",
        "max_ts",
        "next_offset",
        "path",
        "size",
    )

    def __init__(self, base: int, path: Path) -> None:
        self.base = base
        self.path = path
        self.fd = -1
        self.gen = 0
        self.ident = -1
        self.size = 0
        self.next_offset = base
        self.index: SparseIndex | None = None
        self.active = False
        self.dirty = False
        self.max_ts: int | None = None

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(".index")

    def close(self) -> None:
        if self.fd >= 0:
            if self.dirty:
                _fdatasync(self.fd)
                self.dirty = False
            os.close(self.fd)
        self.fd = -1
        self.ident = -1
        self.index = None
        self.max_ts = None


class _Topic:
    __slots__ = (
        "compacted",
        "dir",
        "index_interval",
        "name",
        "queue_count",
        "queues",
        "retention_bytes",
        "retention_ms",
        "segment_bytes",
    )

    def __init__(self, name: str, path: Path, meta: dict[str, Any]) -> None:
        self.name = name
        self.dir = path
        self.queue_count: int = meta["queues"]
        self.compacted: bool = meta.get("compacted", False)
        self.retention_ms: int | None = meta.get("retention_ms")
        self.retention_bytes: int | None = meta.get("retention_bytes")
        self.segment_bytes: int = meta["segment_bytes"]
        self.index_interval: int = meta["index_interval_bytes"]
        self.queues: list[_Queue | None] = [None] * self.queue_count


class _Queue:
    """One queue's segments; every access holds ``mutex`` (appends also ``write_lock``)."""

    def __init__(self, topic: _Topic, number: int) -> None:
        self.topic = topic
        self.number = number
        self.dir = topic.dir / str(number)
        self.mutex = threading.RLock()
        self.write_lock = _FileLock(self.dir / "lock")
        self.maint_lock = _FileLock(self.dir / "maint.lock")
        self.segments: list[_Segment] = []
        self.bases: list[int] = []
        self.start = 0
        self.dir_mtime = -1
        self.dir_racy = True
        self.open_closed: OrderedDict[int, _Segment] = OrderedDict()
        # the last decoded frame: reads of fewer records than a batch decode it once
        self.cache_key: tuple[int, int] = (-1, -1)
        self.cache_columns = RecordColumns(range(0), [], [], [], [])
        # the last block read (of validated, so unchanging, bytes), for the next read
        self.read_buffer = ReadBuffer()
        # (segment base, bytes, end offset) known whole (and synced, unless fsync="never")
        self.durable: tuple[int, int, int] | None = None
        self.synced_base = -1  # the newest segment whose directory entry is durable

    @property
    def end(self) -> int:
        return self.segments[-1].next_offset

    @property
    def name(self) -> str:
        return f"{self.topic.name!r}[{self.number}]"

    def segment_path(self, base: int) -> Path:
        return self.dir / f"{base:020d}.log"


def has_topic(root: str | Path, name: str) -> bool:
    """Whether the log at ``root`` has the topic ``name``, looked up without opening
    the log (which would create its directories)."""
    return (Path(root) / "topics" / _encode_name(name) / "meta.json").exists()


def has_group(root: str | Path, group: str) -> bool:
    """Whether ``group`` committed offsets in the log at ``root`` (without opening it)."""
    return (Path(root) / "groups" / _encode_name(group)).is_dir()


class FileBroker:
    """Topics, queues and consumer-group offsets in files under ``root``.

    ``fsync`` is ``"commit"`` (default), ``"always"`` or ``"never"`` (see the module
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
        self._topics: dict[str, _Topic] = {}
        self._lock = threading.RLock()
        self._create_lock = _FileLock(self._topics_dir / ".create.lock")
        self._dirty: set[tuple[_Queue, _Segment]] = set()
        self._dirty_dirs: set[Path] = set()
        self._unmarked: set[_Queue] = set()  # queues appended to since their durable point
        self._dirty_lock = threading.Lock()
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
        if old is None:
            if queues < 1:
                raise ConfigError(f"topic {name!r} needs at least one queue; got {queues}")
            for what, v in (("retention_ms", retention_ms), ("retention_bytes", retention_bytes)):
                if v is not None and (not isinstance(v, int) or v < 0):
                    raise ConfigError(f"{what} must be None or an int >= 0; got {v!r}")
            if segment_bytes is not None and segment_bytes < 1:
                raise ConfigError(f"segment_bytes must be positive; got {segment_bytes}")
            with self._lock, self._create_lock:
                old = self._topic(name)
                if old is None:
                    self._make_topic(
                        name, queues, compacted, retention_ms, retention_bytes, segment_bytes
                    )
                    return
        if old.queue_count != queues:
            raise ConfigError(
                f"topic {name!r} exists with {old.queue_count} queues; asked for {queues}"
            )

    def _make_topic(
        self,
        name: str,
        queues: int,
        compacted: bool,
        retention_ms: int | None,
        retention_bytes: int | None,
        segment_bytes: int | None,
    ) -> None:
        tdir = self._topics_dir / _encode_name(name)
        meta = {
            "format": 1,
            "name": name,
            "queues": queues,
            "compacted": compacted,
            "retention_ms": retention_ms,
            "retention_bytes": retention_bytes,
            "segment_bytes": segment_bytes or self.segment_bytes,
            "index_interval_bytes": self.index_interval_bytes,
        }
        meta["crc"] = _meta_crc(meta)
        _makedirs(tdir, sync=self._sync)
        for i in range(queues):
            qdir = tdir / str(i)
            qdir.mkdir(exist_ok=True)
            os.close(os.open(qdir / f"{0:020d}.log", os.O_WRONLY | os.O_CREAT, 0o644))
            if self._sync:
                _fsync_dir(qdir)
        # meta.json last: its presence is what makes the topic exist
        data = json.dumps(meta, indent=2).encode() + b"\n"
        _atomic_write(tdir / "meta.json", data, sync=self._sync)
        self._topics[name] = _Topic(name, tdir, meta)

    def _topic(self, name: str) -> _Topic | None:
        t = self._topics.get(name)
        if t is None:
            tdir = self._topics_dir / _encode_name(name)
            try:
                data = (tdir / "meta.json").read_bytes()
            except FileNotFoundError:
                return None
            try:
                meta = json.loads(data)
                if isinstance(meta, dict) and "crc" in meta and meta["crc"] != _meta_crc(meta):
                    raise ValueError("checksum mismatch")
                if not isinstance(meta, dict) or meta.get("name") != name:
                    raise ValueError(
                        f"it names {meta.get('name') if isinstance(meta, dict) else meta!r}"
                    )
                if not isinstance(meta.get("queues"), int) or meta["queues"] < 1:
                    raise ValueError(f"queues {meta.get('queues')!r}")
                for k in ("segment_bytes", "index_interval_bytes"):
                    if not isinstance(meta.get(k), int) or meta[k] < 1:
                        raise ValueError(f"{k} {meta.get(k)!r}")
            except (ValueError, UnicodeDecodeError) as e:
                raise CorruptLogError(
                    name, None, str(tdir / "meta.json"), None,
                    f"the topic's metadata file is damaged ({e})", root=self.root,
                ) from None  # fmt: skip
            with self._lock:
                t = self._topics.setdefault(name, _Topic(name, tdir, meta))
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

    # -- queues: open, refresh, recover ------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"{self!r} is closed")

    def _queue(self, topic: str, queue: int) -> _Queue:
        self._check_open()
        t = self._topic(topic)
        if t is None:
            raise ConfigError(f"topic {topic!r} does not exist")
        if not 0 <= queue < t.queue_count:
            raise ConfigError(f"topic {topic!r} has no queue {queue} (it has {t.queue_count})")
        q = t.queues[queue]
        if q is None:
            with self._lock:
                q = t.queues[queue]
                if q is None:
                    q = _Queue(t, queue)
                    with q.mutex, q.write_lock:
                        q.durable = self._read_durable(q)
                        self._relist(q, locked=True)
                        q.synced_base = q.bases[-1]
                        self._check_end(q)
                    t.queues[queue] = q
        return q

    def _relist(self, q: _Queue, *, locked: bool) -> None:
        """Reload the segment list and start offset from the queue directory.

        Without the write lock a listing can be stale by the time a file is opened (the
        last segment rolled, then compaction merged it away): list again.
        """
        for attempt in range(100):
            try:
                return self._relist_once(q, locked=locked)
            except FileNotFoundError:
                if attempt == 99:
                    raise

    def _relist_once(self, q: _Queue, *, locked: bool) -> None:
        mtime = os.stat(q.dir).st_mtime_ns
        bases = sorted(
            int(m.group(1)) for m in map(_SEGMENT_NAME.match, os.listdir(q.dir)) if m is not None
        )
        try:
            start = self._read_start(q)
        except FileNotFoundError:
            start = 0
        if not bases:  # every segment removed by hand: start afresh where the log ended
            if not locked:
                with q.write_lock:
                    return self._relist(q, locked=True)
            base = max(start, q.end if q.segments else 0)
            os.close(os.open(q.segment_path(base), os.O_WRONLY | os.O_CREAT, 0o644))
            bases = [base]
        old = {s.base: s for s in q.segments}
        segments = []
        for b in bases:
            s = old.pop(b, None)
            if s is not None and s.fd >= 0 and not s.active:
                try:
                    replaced = os.stat(s.path).st_ino != s.ident
                except FileNotFoundError:
                    replaced = True
                if replaced:  # compaction swapped the file: forget all we knew of it
                    self._drop_closed(q, s)
            segments.append(s if s is not None else _Segment(b, q.segment_path(b)))
        for s in old.values():
            self._drop_closed(q, s)
        for s in segments[:-1]:
            if s.active:  # another process rolled: reopen it as a closed (complete) file
                s.active = False
                self._drop_closed(q, s)
        q.segments = segments
        q.bases = bases
        q.start = max(start, bases[0])
        q.dir_mtime = mtime
        q.dir_racy = time.time_ns() - mtime < _RACY_NS
        last = segments[-1]
        if not last.active:
            self._init_active(q, last, locked=locked)

    def _read_start(self, q: _Queue) -> int:
        """The logical start offset after purges: ``"<offset> <crc32>"`` (or a bare
        offset, as written before the crc); FileNotFoundError if never purged."""
        path = q.dir / "start-offset"
        data = path.read_bytes()
        try:
            return parse_start(data.decode())
        except ValueError as e:  # (UnicodeDecodeError included)
            raise _corrupt(q, path, None, f"the start-offset file is damaged ({e})") from None

    def _drop_closed(self, q: _Queue, seg: _Segment) -> None:
        q.open_closed.pop(seg.base, None)
        seg.close()

    def _init_active(self, q: _Queue, seg: _Segment, *, locked: bool) -> None:
        """Open the last segment: start from its last sound index entry, scan to the end."""
        seg.close()
        seg.fd = os.open(seg.path, os.O_RDWR)
        seg.gen = next(_generations)
        st = os.fstat(seg.fd)
        seg.ident = st.st_ino
        seg.active = True
        idx, whole = SparseIndex.load(seg.index_path, q.topic.index_interval, st.st_size)
        loaded = len(idx)
        n = loaded
        while n:  # the last entry that points at the frame it names
            h = read_header(seg.fd, idx.positions[n - 1])
            if h is not None and h[0] == idx.offsets[n - 1]:
                break
            n -= 1
        idx.truncate(n)
        seg.index = idx
        seg.size = idx.positions[n - 1] if n else 0
        seg.next_offset = idx.offsets[n - 1] if n else seg.base
        self._scan_active(q, seg, st.st_size, locked=locked)
        if locked and not (whole and len(seg.index) == loaded):
            self._rewrite_active_index(seg)

    def _rewrite_active_index(self, seg: _Segment) -> None:
        """Rewrite the active segment's index in place (holding the queue's write lock)."""
        assert seg.index is not None
        fd = os.open(seg.index_path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            data = seg.index.to_bytes()
            _write_all(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    def _scan_active(self, q: _Queue, seg: _Segment, size: int, *, locked: bool) -> None:
        """Take in the frames between ``seg.size`` and ``size`` that are whole and sound."""
        assert seg.index is not None
        try:
            for pos, base, _count, last_delta, _ts, stop, crc, frame in iter_frames(
                seg.fd, seg.size, size
            ):
                assert frame is not None
                if base != seg.next_offset:
                    raise FrameError(pos, f"frame offset {base}; expected {seg.next_offset}")
                if not frame_crc_ok(frame, crc):
                    raise FrameError(pos, "crc mismatch")
                seg.index.observe(base, pos)
                seg.size = stop
                seg.next_offset = base + last_delta + 1
        except FrameError as e:
            self._bad_tail(q, seg, e, size, locked=locked)

    def _read_durable(self, q: _Queue) -> tuple[int, int, int] | None:
        """The queue's durable point: (segment base, bytes, end offset), or None."""
        path = q.dir / DURABLE_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            seg, size, end = parse_durable(data.decode())
        except (ValueError, UnicodeDecodeError) as e:
            raise _corrupt(
                q, path, None,
                f"the durable-point file is damaged ({e}); if `rstreams topics check` finds "
                f"the queue's segments sound, delete this file",
            ) from None  # fmt: skip
        return seg, size, end

    def _mark_durable(self, q: _Queue) -> None:
        """Record how far the queue is whole (and synced): bytes before it are never a
        torn tail, and the log may never end below it."""
        with q.mutex:
            seg = q.segments[-1]
            if not seg.active or seg.fd < 0:
                return
            if self._sync:
                if seg.dirty:
                    _sync_segment(seg)
                    seg.dirty = False
                if seg.base > q.synced_base:  # the segment's directory entry, too
                    _fsync_dir(q.dir)
                    q.synced_base = seg.base
            point = (seg.base, seg.size, seg.next_offset)
            with q.write_lock:
                old = self._read_durable(q)
                if old is not None and old[2] >= point[2]:
                    q.durable = old
                    return
                _atomic_write(
                    q.dir / DURABLE_FILE, format_durable(*point), sync=False, point="log-durable"
                )
                q.durable = point

    def _check_end(self, q: _Queue) -> None:
        """Refuse a log that ends below what was synced, committed or referenced."""
        last = q.segments[-1]
        if q.durable is not None and q.end < q.durable[2]:
            seg, size, end = q.durable
            raise _corrupt(
                q, last.path, last.size,
                f"the log ends at offset {q.end} but offsets up to {end - 1} were written "
                f"whole (segment {seg:020d}.log up to byte {size}): records "
                f"{q.end}..{end - 1} are missing (a segment was cut short or deleted)",
                q.end,
            )  # fmt: skip
        for group, offset in self._committed_by(q):
            if offset > q.end:
                raise _corrupt(
                    q, last.path, last.size,
                    f"the log ends at offset {q.end} but group {group!r} committed offset "
                    f"{offset}: records {q.end}..{offset - 1} are missing, and new records "
                    f"would reuse their offsets",
                    q.end,
                )  # fmt: skip

    def _committed_by(self, q: _Queue) -> Iterator[tuple[str, int]]:
        """(group, committed offset) of every group that committed this queue."""
        return self._offsets.committed_by(q.topic.name, q.number)

    def _bad_tail(
        self, q: _Queue, seg: _Segment, e: FrameError, size: int, *, locked: bool
    ) -> None:
        if not locked:
            # A frame still being written is just not visible yet. Only a damaged frame
            # with valid ones after it (maybe a writer's recovery racing with us) is
            # looked at again, holding the lock, where it is truncated or reported.
            if not e.incomplete and find_frame_after(seg.fd, e.pos, size, seg.next_offset):
                with q.write_lock:
                    self._catch_up(q, locked=True)
            return
        after = find_frame_after(seg.fd, e.pos, size, seg.next_offset)
        if after is not None:
            raise _corrupt(
                q, seg.path, e.pos, f"{e.reason}; a valid frame follows at byte {after}",
                seg.next_offset,
            )  # fmt: skip
        mark = self._read_durable(q)  # another process may have moved it
        if mark is not None and below_durable(mark, seg.base, e.pos):
            synced = "synced" if self._sync else "written whole"
            raise _corrupt(
                q, seg.path, e.pos,
                f"{e.reason}; the queue was {synced} up to offset {mark[2]} (segment "
                f"{mark[0]:020d}.log, byte {mark[1]}), so this is damage, not a torn write",
                seg.next_offset,
            )  # fmt: skip
        log.warning(
            "file log %s: truncating the torn tail of %s at byte %d (%d bytes dropped: %s)",
            q.name,
            seg.path,
            e.pos,
            size - e.pos,
            e.reason,
        )
        os.ftruncate(seg.fd, e.pos)
        if self._sync:
            _fdatasync(seg.fd)
        assert seg.index is not None
        seg.index.truncate(bisect_right(seg.index.positions, e.pos - 1))
        self._rewrite_active_index(seg)

    def _catch_up(self, q: _Queue, *, locked: bool) -> None:
        """Take in what other processes appended: new frames, then rolled segments."""
        while True:
            seg = q.segments[-1]
            size = os.fstat(seg.fd).st_size
            if size > seg.size:
                self._scan_active(q, seg, size, locked=locked)
            elif size < seg.size:
                raise _corrupt(
                    q, seg.path, size, f"the file shrank below its {seg.size} valid bytes"
                )
            if seg is not q.segments[-1]:
                continue  # a locked re-check relisted under us
            if seg.next_offset == seg.base or not q.segment_path(seg.next_offset).exists():
                return
            self._relist(q, locked=locked)

    def _refresh(self, q: _Queue) -> None:
        """Lock-free update of this process's view: directory changes and new frames."""
        if q.dir_racy or os.stat(q.dir).st_mtime_ns != q.dir_mtime:
            self._relist(q, locked=False)
        self._catch_up(q, locked=False)

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
        q = self._queue(topic, queue)
        with q.mutex, q.write_lock:
            self._catch_up(q, locked=True)
            base = q.end
            frame = build_frame(base, payload, count, count - 1, max_ts)
            seg = q.segments[-1]
            if seg.size > 0 and seg.size + len(frame) > q.topic.segment_bytes:
                seg = self._roll(q)
            pos = seg.size
            try:
                if POINTS:
                    maybe_fail("log-append", seg.path)
                    maybe_fail(f"log-append/{topic}", seg.path)
                _write_all(seg.fd, frame, pos)
            except BaseException as e:
                # A full disk: no part of the frame stays (a later append of this
                # process, or the next owner, starts where the log is whole).
                with contextlib.suppress(OSError):
                    os.ftruncate(seg.fd, pos)
                if isinstance(e, OSError):
                    raise with_path(e, seg.path) from None
                raise
            assert seg.index is not None
            if seg.index.observe(base, pos):
                # (failing, the frame is written all the same: the next access to the
                # queue takes it in, and the index is rebuildable)
                fd = os.open(seg.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    maybe_fail("log-index", seg.index_path)
                    os.write(fd, seg.index.to_bytes()[-16:])
                except OSError as e:
                    raise with_path(e, seg.index_path) from None
                finally:
                    os.close(fd)
            seg.size = pos + len(frame)
            seg.next_offset = base + count
            with self._dirty_lock:
                self._unmarked.add(q)
            if self.fsync == "always":
                _sync_segment(seg)
            elif self.fsync == "commit" and not seg.dirty:
                seg.dirty = True
                with self._dirty_lock:
                    self._dirty.add((q, seg))
        return base

    def _roll(self, q: _Queue) -> _Segment:
        """Close the active segment (durable first) and start one at the end offset."""
        old = q.segments[-1]
        if self._sync:
            _sync_segment(old)
            old.dirty = False
        base = old.next_offset
        seg = _Segment(base, q.segment_path(base))
        maybe_fail("log-roll", seg.path)
        seg.fd = os.open(seg.path, os.O_RDWR | os.O_CREAT, 0o644)
        seg.gen = next(_generations)
        if os.fstat(seg.fd).st_size:
            raise _corrupt(q, seg.path, 0, "a new segment file already has data", base)
        seg.ident = os.fstat(seg.fd).st_ino
        seg.active = True
        seg.index = SparseIndex(q.topic.index_interval)
        with contextlib.suppress(FileNotFoundError):
            seg.index_path.unlink()  # leftover of a crashed roll
        old.active = False  # its fd, size and index stay valid: we wrote all of it
        q.segments.append(seg)
        q.bases.append(base)
        self._keep_open(q, old)
        if self.fsync == "always":
            _fsync_dir(q.dir)
        elif self.fsync == "commit":
            with self._dirty_lock:
                self._dirty_dirs.add(q.dir)
        return seg

    def _keep_open(self, q: _Queue, seg: _Segment) -> None:
        q.open_closed[seg.base] = seg
        q.open_closed.move_to_end(seg.base)
        while len(q.open_closed) > _MAX_OPEN_CLOSED_SEGMENTS:
            _, victim = q.open_closed.popitem(last=False)
            victim.close()

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
            return self._read_columns(q, offset, max_records)
        except FileNotFoundError:
            # Maintenance in another process kept replacing segments as we relisted
            # them: read once more while holding it off (it takes this lock to swap).
            with q.maint_lock:  # taken before the mutex, as maintenance does
                with q.mutex:
                    self._relist(q, locked=False)
                return self._read_columns(q, offset, max_records)

    def _read_columns(self, q: _Queue, offset: int, max_records: int | None) -> RecordColumns:
        topic, queue = q.topic.name, q.number
        out = _Collected(offset)
        with q.mutex:
            if offset < q.start:
                raise ConfigError(
                    f"offset {offset} of {topic}[{queue}] was purged; the queue starts at {q.start}"
                )
            if max_records is not None and max_records <= 0:
                return out.columns()
            if offset >= q.end:
                self._refresh(q)
                if offset >= q.end:
                    return out.columns()
            limit = sys.maxsize if max_records is None else max_records
            self._read_retrying(q, offset, limit, out)
            if out.count < limit:  # short of what was asked: take in what others appended since
                known = q.end
                self._refresh(q)
                if q.end > known:
                    self._read_retrying(q, out.next_offset, limit, out)
            return out.columns()

    def _read_retrying(self, q: _Queue, offset: int, limit: int, out: _Collected) -> None:
        for attempt in range(4):
            try:
                self._read_into(q, max(offset, out.next_offset), limit, out)
                return
            except FileNotFoundError:  # a segment was purged or merged by another process
                if attempt == 3:
                    raise
                self._relist(q, locked=False)
                if offset < q.start:
                    raise ConfigError(
                        f"offset {offset} of {q.topic.name}[{q.number}] was purged; "
                        f"the queue starts at {q.start}"
                    ) from None

    def _read_into(self, q: _Queue, offset: int, limit: int, out: _Collected) -> None:
        i = max(bisect_right(q.bases, offset) - 1, 0)
        segments = q.segments
        while i < len(segments) and out.count < limit:
            seg = segments[i]
            end = self._read_segment(q, seg, offset, limit, out)
            if (
                out.count < limit
                and i + 1 < len(segments)
                and end != segments[i + 1].base
                and not q.topic.compacted  # compaction may drop a segment's last records
            ):
                # A closed segment cut at a frame boundary reads cleanly but too short.
                raise _corrupt(
                    q, seg.path, seg.size,
                    f"the segment ends at offset {end} but the next one starts at "
                    f"{segments[i + 1].base}: records {end}..{segments[i + 1].base - 1} are "
                    f"missing (the file was cut short)",
                    end,
                )  # fmt: skip
            offset = max(offset, out.next_offset)
            i += 1

    def _open_closed(self, q: _Queue, seg: _Segment) -> None:
        seg.fd = os.open(seg.path, os.O_RDONLY)
        seg.gen = next(_generations)
        st = os.fstat(seg.fd)
        seg.ident = st.st_ino
        seg.size = st.st_size
        idx, whole = SparseIndex.load(seg.index_path, q.topic.index_interval, seg.size)
        if not whole:
            idx = self._rebuild_closed_index(q, seg)
        seg.index = idx
        self._keep_open(q, seg)

    def _rebuild_closed_index(self, q: _Queue, seg: _Segment) -> SparseIndex:
        idx = SparseIndex.scan(seg.fd, seg.size, q.topic.index_interval)
        log.info("file log %s: rebuilt the index of %s (%d entries)", q.name, seg.path, len(idx))
        with contextlib.suppress(FileNotFoundError):
            if os.stat(seg.path).st_ino == seg.ident:  # not if compaction replaced the file
                tmp = seg.index_path.with_name(f".{seg.index_path.name}.{os.getpid()}.tmp")
                tmp.write_bytes(idx.to_bytes())
                os.replace(tmp, seg.index_path)
        return idx

    def _read_segment(
        self, q: _Queue, seg: _Segment, offset: int, limit: int, out: _Collected
    ) -> int:
        """Append to ``out`` the records of ``seg`` with offsets >= ``offset``, up to ``limit``.

        Returns the offset after the last frame read (the segment's end when ``out`` did
        not fill up)."""
        if seg.fd < 0:
            self._open_closed(q, seg)
        elif not seg.active:
            q.open_closed.move_to_end(seg.base)
        assert seg.index is not None
        idx = seg.index
        for attempt in (0, 1):
            k = bisect_right(idx.offsets, offset) - 1
            pos, expect = (idx.positions[k], idx.offsets[k]) if k >= 0 else (0, seg.base)
            try:
                return self._read_frames(q, seg, pos, expect if k >= 0 else -1, offset, limit, out)
            except _StaleIndex:
                if attempt:
                    break
                if seg.active:
                    idx = seg.index = SparseIndex.scan(seg.fd, seg.size, q.topic.index_interval)
                else:
                    idx = seg.index = self._rebuild_closed_index(q, seg)
        raise _corrupt(q, seg.path, 0, "unusable index")

    def _read_frames(
        self,
        q: _Queue,
        seg: _Segment,
        pos: int,
        expect: int,
        offset: int,
        limit: int,
        out: _Collected,
    ) -> int:
        at = expect if expect >= 0 else seg.base  # offset of the next frame
        try:
            buffer = q.read_buffer.use(seg.gen)
            for fpos, base, count, last_delta, _ts, _stop, crc, frame in iter_frames(
                seg.fd, pos, seg.size, block=_READ_BLOCK, buffer=buffer
            ):
                if expect >= 0:
                    if base != expect:
                        raise _StaleIndex
                    expect = -1
                if base + last_delta < offset:
                    at = base + last_delta + 1
                    continue
                assert frame is not None
                key = (seg.gen, fpos)
                if key == q.cache_key:
                    columns = q.cache_columns
                else:
                    if not frame_crc_ok(frame, crc):
                        raise FrameError(fpos, "crc mismatch")
                    try:
                        columns = decode_columns(frame, base, count, last_delta)
                    except FrameError as e:
                        raise FrameError(fpos, e.reason) from None
                    q.cache_key, q.cache_columns = key, columns
                at = base + last_delta + 1
                j = columns.index_of(offset) if base < offset else 0
                want = limit - out.count
                out.add(columns if j == 0 and want >= count else columns.slice(j, j + want))
                if out.count >= limit:
                    return at
        except FrameError as e:
            if expect >= 0 and e.pos == pos:
                raise _StaleIndex from None
            if seg.active:
                reason = e.reason  # below the validated size: damaged after it was checked
            elif e.incomplete:
                reason = f"{e.reason} (the segment is cut short)"
            else:
                after = find_frame_after(seg.fd, e.pos, seg.size, seg.base)
                reason = e.reason + (f"; a valid frame follows at byte {after}" if after else "")
            raise _corrupt(q, seg.path, e.pos, reason, at) from None
        return at

    def end_offset(self, topic: str, queue: int) -> int:
        q = self._queue(topic, queue)
        with q.mutex:
            self._refresh(q)
            return q.end

    def start_offset(self, topic: str, queue: int) -> int:
        q = self._queue(topic, queue)
        with q.mutex:
            self._refresh(q)
            return q.start

    # -- purge, retention, compaction ---------------------------------------------------

    def _set_start(self, q: _Queue, start: int) -> None:
        if start > q.start:
            _atomic_write(q.dir / "start-offset", format_start(start), sync=self._sync)
            q.start = start

    def _delete_segments(self, q: _Queue, doomed: list[_Segment]) -> None:
        for s in doomed:
            self._drop_closed(q, s)
            for p in (s.path, s.index_path):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
        if doomed:
            if self._sync:
                _fsync_dir(q.dir)
            self._relist(q, locked=False)

    def purge(self, topic: str, queue: int, before: int) -> None:
        """Drop records below offset ``before`` (once every reader has committed past them).

        The start offset moves to ``min(before, end)`` at once (reads below it raise
        :class:`ConfigError`); the segments entirely below it are deleted. The active
        segment is never deleted.
        """
        q = self._queue(topic, queue)
        with q.maint_lock, q.mutex:
            self._refresh(q)
            self._set_start(q, min(before, q.end))
            segs = q.segments
            doomed = [s for s, nxt in itertools.pairwise(segs) if nxt.base <= q.start]
            self._delete_segments(q, doomed)

    def _max_ts(self, q: _Queue, seg: _Segment) -> int | None:
        """The largest record timestamp of a closed segment; None if it has no records."""
        if seg.fd < 0:
            self._open_closed(q, seg)
        if seg.max_ts is None and seg.size:
            newest = -sys.maxsize
            try:
                for f in iter_frames(seg.fd, 0, seg.size, payload=False):
                    newest = max(newest, f[4])
            except FrameError as e:  # keep what cannot be read whole: someone should look
                log.warning("file log %s: %s is damaged (%s); kept", q.name, seg.path, e)
                newest = sys.maxsize
            seg.max_ts = newest
        return seg.max_ts

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
                deleted += self._retain(self._queue(name, i), now)
        return deleted

    def _retain(self, q: _Queue, now: int) -> int:
        t = q.topic
        with q.maint_lock, q.mutex:
            self._refresh(q)
            sizes = [s.size if s.fd >= 0 else s.path.stat().st_size for s in q.segments]
            total = sum(sizes)
            doomed = []
            for s, size in zip(q.segments[:-1], sizes):
                if t.retention_bytes is not None and total - size >= t.retention_bytes:
                    pass  # the queue stays big enough without it
                elif t.retention_ms is not None:
                    newest = self._max_ts(q, s)
                    if newest is not None and newest >= now - t.retention_ms:
                        break
                else:
                    break
                doomed.append(s)
                total -= size
            if doomed:
                self._set_start(q, q.segments[len(doomed)].base)
                self._delete_segments(q, doomed)
            return len(doomed)

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
            raise ConfigError(f"topic {topic!r} is not compacted; create it with compacted=True")
        horizon = (_now_ms() if now_ms is None else now_ms) - tombstone_retention_ms
        with q.maint_lock:
            for stale in q.dir.glob("*.cleaned"):
                stale.unlink()
            with q.mutex, q.write_lock:
                self._refresh(q)
                self._catch_up(q, locked=True)
                closed = [(s.base, s.path) for s in q.segments[:-1]]
                active = q.segments[-1]
                active_part = (active.path, active.size)
                start = q.start
            if not closed:
                return 0
            sources = [(p, -1) for _, p in closed] + [active_part]
            latest: dict[bytes, int] = {}
            for batch in _batches_of(q, sources, [start - 1]):
                for r in batch:
                    if r.key is not None:
                        latest[r.key] = r.offset
            groups: list[tuple[int, list[int], _SegmentWriter]] = []
            removed = 0
            floor = [start - 1]
            writer: _SegmentWriter | None = None
            try:
                for b, p in closed:
                    size = p.stat().st_size
                    if writer is None or (
                        writer.size and writer.size + size > q.topic.segment_bytes
                    ):
                        writer = _SegmentWriter(q.dir, b, q.topic.index_interval)
                        groups.append((b, [], writer))
                    groups[-1][1].append(b)
                    for batch in _batches_of(q, [(p, -1)], floor):
                        kept = [
                            r
                            for r in batch
                            if (r.key is None or latest.get(r.key, r.offset) == r.offset)
                            and not (r.value is None and r.timestamp < horizon)
                        ]
                        removed += len(batch) - len(kept)
                        if kept:
                            writer.write(kept)
                for _, _, w in groups:
                    w.finish(sync=self._sync)
            except BaseException:
                for _, _, w in groups:
                    w.discard()
                raise
            with q.mutex:
                for first, members, w in groups:
                    os.replace(w.log_tmp, q.segment_path(first))
                    os.replace(w.index_tmp, q.segment_path(first).with_suffix(".index"))
                    for b in members[1:]:
                        for p in (q.segment_path(b), q.segment_path(b).with_suffix(".index")):
                            with contextlib.suppress(FileNotFoundError):
                                p.unlink()
                if self._sync:
                    _fsync_dir(q.dir)
                self._relist(q, locked=False)
        return removed

    # -- groups (stored by FileGroupOffsets) ---------------------------------------------

    def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        """Record ``group``'s position in a queue, after making appended data durable."""
        self._check_open()
        self.flush()
        self._offsets.commit(group, topic, queue, offset)

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
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
            dirs, self._dirty_dirs = self._dirty_dirs, set()
            marks, self._unmarked = self._unmarked, set()
        try:
            for q, seg in dirty:
                with q.mutex:
                    if seg.dirty and seg.fd >= 0:
                        _sync_segment(seg)
                    seg.dirty = False
            for d in dirs:
                _fsync_dir(d)
            for q in marks:
                self._mark_durable(q)
        except BaseException:
            # Not durable: the next flush tries all of it again, and never says
            # durable what this one could not make so.
            with self._dirty_lock:
                self._dirty |= {(q, seg) for q, seg in dirty if seg.dirty}
                self._dirty_dirs |= dirs
                self._unmarked |= marks
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
                    if q is None:
                        continue
                    with q.mutex:
                        for s in q.segments:
                            s.close()
                        q.write_lock.close()
                        q.maint_lock.close()
            self._create_lock.close()


class _Collected:
    """Column parts gathered by a read, and where the next record would start."""

    __slots__ = ("count", "next_offset", "parts")

    def __init__(self, offset: int) -> None:
        self.parts: list[RecordColumns] = []
        self.count = 0
        self.next_offset = offset

    def add(self, part: RecordColumns) -> None:
        if len(part):
            self.parts.append(part)
            self.count += len(part)
            self.next_offset = part.last_offset + 1

    def columns(self) -> RecordColumns:
        return RecordColumns.concat(self.parts)


class _StaleIndex(Exception):
    """An index entry does not point at the frame it names."""


class _SegmentWriter:
    """Writes a compacted segment aside (``.cleaned`` files) for an atomic swap."""

    def __init__(self, qdir: Path, base: int, interval: int) -> None:
        self.log_tmp = qdir / f"{base:020d}.log.cleaned"
        self.index_tmp = qdir / f"{base:020d}.index.cleaned"
        self.fd = os.open(self.log_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.size = 0
        self.index = SparseIndex(interval)

    def write(self, records: list[LogRecord]) -> None:
        base = records[0].offset
        payload = encode_records(records)
        last_delta = records[-1].offset - base
        frame = build_frame(
            base, payload, len(records), last_delta, max(r.timestamp for r in records)
        )
        self.index.observe(base, self.size)
        _write_all(self.fd, frame, self.size)
        self.size += len(frame)

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for p in (self.log_tmp, self.index_tmp):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def finish(self, *, sync: bool) -> None:
        try:
            if sync:
                os.fsync(self.fd)
        finally:
            os.close(self.fd)
            self.fd = -1
        _atomic_write(self.index_tmp, self.index.to_bytes(), sync=False)
        if sync:
            fd = os.open(self.index_tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _batches_of(
    q: _Queue, sources: list[tuple[Path, int]], floor: list[int]
) -> Iterator[list[LogRecord]]:
    """The records of segment files, frame by frame, with offsets above ``floor[0]``.

    ``sources`` are (path, size); size -1 reads the whole file. ``floor[0]`` rises to the
    last offset yielded, so a copy of records left by an interrupted compaction (a merged
    segment next to a segment it replaced) is read once. Opens its own file descriptors,
    so compaction reads without holding the queue's mutex.
    """
    for path, size in sources:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            end = os.fstat(fd).st_size if size < 0 else size
            try:
                for pos, base, count, last_delta, _ts, _s, crc, frame in iter_frames(fd, 0, end):
                    assert frame is not None
                    if base + last_delta <= floor[0]:
                        continue
                    if not frame_crc_ok(frame, crc):
                        raise FrameError(pos, "crc mismatch")
                    records = decode_frame(frame, base, count, last_delta)
                    batch = [r for r in records if r.offset > floor[0]]
                    if batch:
                        floor[0] = batch[-1].offset
                        yield batch
            except FrameError as e:
                raise _corrupt(q, path, e.pos, e.reason) from None
        finally:
            os.close(fd)
