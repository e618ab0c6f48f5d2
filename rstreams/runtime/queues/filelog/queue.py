"""One queue (partition) of the file log: an object that owns its state.

A :class:`Queue` holds its segments, end offset, start offset, durable point and read
cache, and recovers them when it is opened: the last segment is checked from its last
sound index entry on and a torn tail is cut away (or reported as damage when it lies
below the durable point or has valid frames after it). It appends frames (rolling
segments), takes in what other processes appended, and makes its appends durable.
Reading is :mod:`.reader`, purge and retention :mod:`.retention`, compaction
:mod:`.cleaner`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path

from rstreams.errors import ConfigError
from rstreams.runtime.faults import POINTS
from rstreams.runtime.queues._files import (
    CorruptLogError,
    FileLock,
    _atomic_write,
    _fsync_dir,
)
from rstreams.runtime.queues._logformat import FrameError, build_frame, find_frame_after
from rstreams.runtime.queues.broker import purged
from rstreams.runtime.queues.filelog.marks import (
    DURABLE_FILE,
    START_FILE,
    below_durable,
    format_durable,
    parse_durable,
    parse_start,
)
from rstreams.runtime.queues.filelog.reader import Reader
from rstreams.runtime.queues.filelog.segment import Segment, list_bases, segment_path
from rstreams.runtime.queues.filelog.topic import Topic

log = logging.getLogger("rstreams.runtime.queues.filelog")

_MAX_OPEN_CLOSED_SEGMENTS = 4  # per queue, besides the active segment
_RACY_NS = 1_000_000_000  # a directory changed this recently may change again unseen


class Queue:
    """One queue's segments; every access holds ``mutex`` (appends also ``write_lock``).

    ``fsync`` is the broker's policy; ``on_append`` is told of every append (the broker
    keeps the queues to :meth:`flush`).
    """

    def __init__(
        self, topic: Topic, number: int, fsync: str, on_append: Callable[[Queue], None]
    ) -> None:
        self.topic = topic
        self.number = number
        self.dir = topic.dir / str(number)
        self.fsync = fsync
        self.sync = fsync != "never"
        self._on_append = on_append
        self.mutex = threading.RLock()
        self.write_lock = FileLock(self.dir / "lock")
        self.maint_lock = FileLock(self.dir / "maint.lock")
        self.segments: list[Segment] = []
        self.bases: list[int] = []
        self.start = 0
        self.dir_mtime = -1
        self.dir_racy = True
        self.open_closed: OrderedDict[int, Segment] = OrderedDict()
        self.reader = Reader(self)  # holds the read cache
        # (segment base, bytes, end offset) known whole (and synced, unless fsync="never")
        self.durable: tuple[int, int, int] | None = None
        self.synced_base = -1  # the newest segment whose directory entry is durable
        # what flush() has to do: unsynced segments, the directory, the durable point
        self.unsynced: set[Segment] = set()
        self.dir_unsynced = False
        self.unmarked = False

    @property
    def end(self) -> int:
        return self.segments[-1].next_offset

    @property
    def name(self) -> str:
        return f"{self.topic.name!r}[{self.number}]"

    def segment_path(self, base: int) -> Path:
        return segment_path(self.dir, base)

    def corrupt(
        self, path: str | Path, position: int | None, reason: str, offset: int | None = None
    ) -> CorruptLogError:
        """The error for damage in this queue's file ``path``."""
        return CorruptLogError(
            self.topic.name, self.number, str(path), position, reason, offset=offset,
            root=self.topic.dir.parent.parent,
        )  # fmt: skip

    def purged(self, offset: int) -> ConfigError:
        """The error for a read below the start offset."""
        return purged(self.topic.name, self.number, offset, self.start)

    # -- open, refresh, recover -----------------------------------------------------------

    def open(self, committed: Iterable[tuple[str, int]]) -> None:
        """Recover the queue's state from its directory; ``committed`` is every
        (group, offset) committed for it, which the log may not end below."""
        with self.mutex, self.write_lock:
            self.durable = self.read_durable()
            self.relist(locked=True)
            self.synced_base = self.bases[-1]
            self._check_end(committed)

    def relist(self, *, locked: bool) -> None:
        """Reload the segment list and start offset from the queue directory.

        Without the write lock a listing can be stale by the time a file is opened (the
        last segment rolled, then compaction merged it away): list again.
        """
        for attempt in range(100):
            try:
                return self._relist_once(locked=locked)
            except FileNotFoundError:
                if attempt == 99:
                    raise

    def _relist_once(self, *, locked: bool) -> None:
        mtime = os.stat(self.dir).st_mtime_ns
        bases = list_bases(self.dir)
        try:
            start = self._read_start()
        except FileNotFoundError:
            start = 0
        if not bases:  # every segment removed by hand: start afresh where the log ended
            if not locked:
                with self.write_lock:
                    return self.relist(locked=True)
            base = max(start, self.end if self.segments else 0)
            os.close(os.open(self.segment_path(base), os.O_WRONLY | os.O_CREAT, 0o644))
            bases = [base]
        old = {s.base: s for s in self.segments}
        segments = []
        for b in bases:
            s = old.pop(b, None)
            if s is not None and s.fd >= 0 and not s.active and s.replaced():
                self.drop_closed(s)  # compaction swapped the file: forget all we knew of it
            segments.append(s if s is not None else Segment(b, self.segment_path(b)))
        for s in old.values():
            self.drop_closed(s)
        for s in segments[:-1]:
            if s.active:  # another process rolled: reopen it as a closed (complete) file
                s.active = False
                self.drop_closed(s)
        self.segments = segments
        self.bases = bases
        self.start = max(start, bases[0])
        self.dir_mtime = mtime
        self.dir_racy = time.time_ns() - mtime < _RACY_NS
        last = segments[-1]
        if not last.active:
            self._init_active(last, locked=locked)

    def _read_start(self) -> int:
        """The logical start offset after purges: ``"<offset> <crc32>"`` (or a bare
        offset, as written before the crc); FileNotFoundError if never purged."""
        path = self.dir / START_FILE
        data = path.read_bytes()
        try:
            return parse_start(data.decode())
        except ValueError as e:  # (UnicodeDecodeError included)
            raise self.corrupt(path, None, f"the start-offset file is damaged ({e})") from None

    def drop_closed(self, seg: Segment) -> None:
        self.open_closed.pop(seg.base, None)
        seg.close()

    def _init_active(self, seg: Segment, *, locked: bool) -> None:
        """Open the last segment: start from its last sound index entry, scan to the end."""
        size, loaded = seg.open_active(self.topic.index_interval)
        self._scan_active(seg, size, locked=locked)
        assert seg.index is not None
        if locked and len(seg.index) != loaded:
            seg.rewrite_index()

    def _scan_active(self, seg: Segment, size: int, *, locked: bool) -> None:
        """Take in the frames between ``seg.size`` and ``size`` that are whole and sound."""
        try:
            seg.take_in(size)
        except FrameError as e:
            self._bad_tail(seg, e, size, locked=locked)

    def read_durable(self) -> tuple[int, int, int] | None:
        """The queue's durable point: (segment base, bytes, end offset), or None."""
        path = self.dir / DURABLE_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return parse_durable(data.decode())
        except (ValueError, UnicodeDecodeError) as e:
            raise self.corrupt(
                path, None,
                f"the durable-point file is damaged ({e}); if `rstreams topics check` finds "
                f"the queue's segments sound, delete this file",
            ) from None  # fmt: skip

    def _check_end(self, committed: Iterable[tuple[str, int]]) -> None:
        """Refuse a log that ends below what was synced, committed or referenced."""
        last = self.segments[-1]
        if self.durable is not None and self.end < self.durable[2]:
            seg, size, end = self.durable
            raise self.corrupt(
                last.path, last.size,
                f"the log ends at offset {self.end} but offsets up to {end - 1} were written "
                f"whole (segment {seg:020d}.log up to byte {size}): records "
                f"{self.end}..{end - 1} are missing (a segment was cut short or deleted)",
                self.end,
            )  # fmt: skip
        for group, offset in committed:
            if offset > self.end:
                raise self.corrupt(
                    last.path, last.size,
                    f"the log ends at offset {self.end} but group {group!r} committed offset "
                    f"{offset}: records {self.end}..{offset - 1} are missing, and new records "
                    f"would reuse their offsets",
                    self.end,
                )  # fmt: skip

    def _bad_tail(self, seg: Segment, e: FrameError, size: int, *, locked: bool) -> None:
        if not locked:
            # A frame still being written is just not visible yet. Only a damaged frame
            # with valid ones after it (maybe a writer's recovery racing with us) is
            # looked at again, holding the lock, where it is truncated or reported.
            if not e.incomplete and find_frame_after(seg.fd, e.pos, size, seg.next_offset):
                with self.write_lock:
                    self.catch_up(locked=True)
            return
        after = find_frame_after(seg.fd, e.pos, size, seg.next_offset)
        if after is not None:
            raise self.corrupt(
                seg.path, e.pos, f"{e.reason}; a valid frame follows at byte {after}",
                seg.next_offset,
            )  # fmt: skip
        mark = self.read_durable()  # another process may have moved it
        if mark is not None and below_durable(mark, seg.base, e.pos):
            synced = "synced" if self.sync else "written whole"
            raise self.corrupt(
                seg.path, e.pos,
                f"{e.reason}; the queue was {synced} up to offset {mark[2]} (segment "
                f"{mark[0]:020d}.log, byte {mark[1]}), so this is damage, not a torn write",
                seg.next_offset,
            )  # fmt: skip
        log.warning(
            "file log %s: truncating the torn tail of %s at byte %d (%d bytes dropped: %s)",
            self.name,
            seg.path,
            e.pos,
            size - e.pos,
            e.reason,
        )
        seg.truncate(e.pos, sync=self.sync)

    def catch_up(self, *, locked: bool) -> None:
        """Take in what other processes appended: new frames, then rolled segments."""
        while True:
            seg = self.segments[-1]
            size = os.fstat(seg.fd).st_size
            if size > seg.size:
                self._scan_active(seg, size, locked=locked)
            elif size < seg.size:
                raise self.corrupt(
                    seg.path, size, f"the file shrank below its {seg.size} valid bytes"
                )
            if seg is not self.segments[-1]:
                continue  # a locked re-check relisted under us
            if seg.next_offset == seg.base or not self.segment_path(seg.next_offset).exists():
                return
            self.relist(locked=locked)

    def refresh(self) -> None:
        """Lock-free update of this process's view: directory changes and new frames."""
        if self.dir_racy or os.stat(self.dir).st_mtime_ns != self.dir_mtime:
            self.relist(locked=False)
        self.catch_up(locked=False)

    # -- append ---------------------------------------------------------------------------

    def append(self, payload: bytes, count: int, max_ts: int) -> int:
        """Append an encoded batch as one frame; the first new offset."""
        with self.mutex, self.write_lock:
            self._on_append(self)  # (first: a roll below leaves the directory to sync)
            self.catch_up(locked=True)
            base = self.end
            frame = build_frame(base, payload, count, count - 1, max_ts)
            seg = self.segments[-1]
            if seg.size > 0 and seg.size + len(frame) > self.topic.segment_bytes:
                seg = self._roll()
            points = ("log-append", f"log-append/{self.topic.name}") if POINTS else ()
            seg.write_frame(frame, base, count, points)
            self.unmarked = True
            if self.fsync == "always":
                seg.sync()
            elif self.fsync == "commit" and not seg.dirty:
                seg.dirty = True
                self.unsynced.add(seg)
        return base

    def _roll(self) -> Segment:
        """Close the active segment (durable first) and start one at the end offset."""
        old = self.segments[-1]
        if self.sync:
            old.sync()
            old.dirty = False
        base = old.next_offset
        seg = Segment.create(self.dir, base, self.topic.index_interval)
        if seg.size:
            raise self.corrupt(seg.path, 0, "a new segment file already has data", base)
        old.active = False  # its fd, size and index stay valid: we wrote all of it
        self.segments.append(seg)
        self.bases.append(base)
        self.keep_open(old)
        if self.fsync == "always":
            _fsync_dir(self.dir)
        elif self.fsync == "commit":
            self.dir_unsynced = True
        return seg

    def keep_open(self, seg: Segment) -> None:
        """Count ``seg`` among the open closed segments, closing the least used past
        the limit."""
        self.open_closed[seg.base] = seg
        self.open_closed.move_to_end(seg.base)
        while len(self.open_closed) > _MAX_OPEN_CLOSED_SEGMENTS:
            _, victim = self.open_closed.popitem(last=False)
            victim.close()

    def load_closed(self, seg: Segment) -> None:
        """Open a closed segment for reading (rebuilding a damaged index)."""
        if not seg.open_closed(self.topic.index_interval):
            self.rebuild_closed_index(seg)
        self.keep_open(seg)

    def rebuild_closed_index(self, seg: Segment) -> None:
        idx = seg.rebuild_index(self.topic.index_interval)
        log.info("file log %s: rebuilt the index of %s (%d entries)", self.name, seg.path, len(idx))

    # -- durability and lifetime ----------------------------------------------------------

    def flush(self) -> None:
        """Make this process's appends durable (per ``fsync``), then move the durable
        point. What fails stays to do for the next flush."""
        with self.mutex:
            for seg in list(self.unsynced):
                if seg.dirty and seg.fd >= 0:
                    seg.sync()
                seg.dirty = False
                self.unsynced.discard(seg)
            if self.dir_unsynced:
                _fsync_dir(self.dir)
                self.dir_unsynced = False
            if self.unmarked:
                self._mark_durable()
                self.unmarked = False

    def _mark_durable(self) -> None:
        """Record how far the queue is whole (and synced): bytes before it are never a
        torn tail, and the log may never end below it."""
        seg = self.segments[-1]
        if not seg.active or seg.fd < 0:
            return
        if self.sync:
            if seg.dirty:
                seg.sync()
                seg.dirty = False
            if seg.base > self.synced_base:  # the segment's directory entry, too
                _fsync_dir(self.dir)
                self.synced_base = seg.base
        point = (seg.base, seg.size, seg.next_offset)
        with self.write_lock:
            old = self.read_durable()
            if old is not None and old[2] >= point[2]:
                self.durable = old
                return
            _atomic_write(
                self.dir / DURABLE_FILE, format_durable(*point), sync=False, point="log-durable"
            )
            self.durable = point

    def close(self) -> None:
        """Release every file of the queue."""
        with self.mutex:
            for s in self.segments:
                s.close()
            self.write_lock.close()
            self.maint_lock.close()
