"""One segment file of a queue: its frames, its sparse index, fsync and tail truncation.

A segment is ``<base:020d>.log`` (record-batch frames, see
:mod:`~rstreams.runtime.queues._logformat`) next to ``<base:020d>.index`` (a sparse,
rebuildable offset -> position index). The queue (:mod:`.queue`) decides what a bad
frame means; this module only reads, writes, syncs and cuts the files.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import sys
from bisect import bisect_right
from pathlib import Path

from rstreams.runtime.faults import maybe_fail
from rstreams.runtime.queues._files import _write_all, with_path
from rstreams.runtime.queues._logformat import (
    FrameError,
    SparseIndex,
    frame_crc_ok,
    iter_frames,
    read_header,
)

log = logging.getLogger("rstreams.runtime.queues.filelog")

SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_fdatasync = getattr(os, "fdatasync", os.fsync)
_generations = itertools.count(1)  # tells apart every file a segment object opens


def segment_path(qdir: Path, base: int) -> Path:
    """The ``.log`` file of the segment starting at offset ``base``."""
    return qdir / f"{base:020d}.log"


def list_bases(qdir: Path) -> list[int]:
    """The base offsets of the segment files in a queue directory, in order."""
    return sorted(int(m.group(1)) for m in map(SEGMENT_NAME.match, os.listdir(qdir)) if m)


class Segment:
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

    def _open(self, flags: int) -> os.stat_result:
        self.fd = os.open(self.path, flags)
        self.gen = next(_generations)
        st = os.fstat(self.fd)
        self.ident = st.st_ino
        return st

    def sync(self) -> None:
        """fdatasync the segment; an error names its file."""
        try:
            maybe_fail("log-sync", self.path)
            _fdatasync(self.fd)
        except OSError as e:
            raise with_path(e, self.path) from None

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

    # -- the active segment ---------------------------------------------------------------

    def open_active(self, interval: int) -> tuple[int, int]:
        """Open as the active segment from its last sound index entry on (``size`` and
        ``next_offset`` point there); (file size, the number of index entries loaded,
        or -1 if the index file was not whole)."""
        self.close()
        st = self._open(os.O_RDWR)
        self.active = True
        idx, whole = SparseIndex.load(self.index_path, interval, st.st_size)
        loaded = n = len(idx)
        while n:  # the last entry that points at the frame it names
            h = read_header(self.fd, idx.positions[n - 1])
            if h is not None and h[0] == idx.offsets[n - 1]:
                break
            n -= 1
        idx.truncate(n)
        self.index = idx
        self.size = idx.positions[n - 1] if n else 0
        self.next_offset = idx.offsets[n - 1] if n else self.base
        return st.st_size, loaded if whole else -1

    @classmethod
    def create(cls, qdir: Path, base: int, interval: int) -> Segment:
        """A new, empty active segment file at ``base`` (a roll)."""
        seg = cls(base, segment_path(qdir, base))
        maybe_fail("log-roll", seg.path)
        seg.fd = os.open(seg.path, os.O_RDWR | os.O_CREAT, 0o644)
        seg.gen = next(_generations)
        st = os.fstat(seg.fd)
        seg.size = st.st_size
        if seg.size:
            return seg  # the caller refuses a file that already has data
        seg.ident = st.st_ino
        seg.active = True
        seg.index = SparseIndex(interval)
        with contextlib.suppress(FileNotFoundError):
            seg.index_path.unlink()  # leftover of a crashed roll
        return seg

    def take_in(self, size: int) -> None:
        """Take in the frames between ``size`` (this object's) and ``size`` (the file's)
        that are whole and sound; FrameError at the first that is not."""
        assert self.index is not None
        for pos, base, _count, last_delta, _ts, stop, crc, frame in iter_frames(
            self.fd, self.size, size
        ):
            assert frame is not None
            if base != self.next_offset:
                raise FrameError(pos, f"frame offset {base}; expected {self.next_offset}")
            if not frame_crc_ok(frame, crc):
                raise FrameError(pos, "crc mismatch")
            self.index.observe(base, pos)
            self.size = stop
            self.next_offset = base + last_delta + 1

    def write_frame(self, frame: bytes, base: int, count: int, points: tuple[str, ...]) -> None:
        """Write one frame at the end; on an error no part of it stays."""
        pos = self.size
        try:
            for point in points:
                maybe_fail(point, self.path)
            _write_all(self.fd, frame, pos)
        except BaseException as e:
            # A full disk: no part of the frame stays (a later append of this
            # process, or the next owner, starts where the log is whole).
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, pos)
            if isinstance(e, OSError):
                raise with_path(e, self.path) from None
            raise
        assert self.index is not None
        if self.index.observe(base, pos):
            # (failing, the frame is written all the same: the next access to the
            # queue takes it in, and the index is rebuildable)
            fd = os.open(self.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                maybe_fail("log-index", self.index_path)
                os.write(fd, self.index.to_bytes()[-16:])
            except OSError as e:
                raise with_path(e, self.index_path) from None
            finally:
                os.close(fd)
        self.size = pos + len(frame)
        self.next_offset = base + count

    def truncate(self, pos: int, *, sync: bool) -> None:
        """Cut an unsynced tail at byte ``pos`` (and the index entries past it)."""
        os.ftruncate(self.fd, pos)
        if sync:
            _fdatasync(self.fd)
        assert self.index is not None
        self.index.truncate(bisect_right(self.index.positions, pos - 1))
        self.rewrite_index()

    def rewrite_index(self) -> None:
        """Rewrite the active segment's index in place (holding the queue's write lock)."""
        assert self.index is not None
        fd = os.open(self.index_path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            data = self.index.to_bytes()
            _write_all(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    # -- a closed segment -----------------------------------------------------------------

    def open_closed(self, interval: int) -> bool:
        """Open a closed segment for reading; whether its index file was whole (if not,
        the caller rebuilds it: :meth:`rebuild_index`)."""
        st = self._open(os.O_RDONLY)
        self.size = st.st_size
        self.index, whole = SparseIndex.load(self.index_path, interval, self.size)
        return whole

    def rebuild_index(self, interval: int) -> SparseIndex:
        """Rebuild a closed segment's index from its frames, and save it."""
        idx = SparseIndex.scan(self.fd, self.size, interval)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(self.path).st_ino == self.ident:  # not if compaction replaced the file
                tmp = self.index_path.with_name(f".{self.index_path.name}.{os.getpid()}.tmp")
                tmp.write_bytes(idx.to_bytes())
                os.replace(tmp, self.index_path)
        self.index = idx
        return idx

    def replaced(self) -> bool:
        """Whether the file at ``path`` is no longer the one this object has open."""
        try:
            return os.stat(self.path).st_ino != self.ident
        except FileNotFoundError:
            return True

    def newest_timestamp(self, owner: str) -> int | None:
        """The largest record timestamp of an open closed segment of queue ``owner``;
        None if it has no records. One that cannot be read whole counts as the newest
        of all, so it is kept."""
        if self.max_ts is None and self.size:
            newest = -sys.maxsize
            try:
                for f in iter_frames(self.fd, 0, self.size, payload=False):
                    newest = max(newest, f[4])
            except FrameError as e:  # keep what cannot be read whole: someone should look
                log.warning("file log %s: %s is damaged (%s); kept", owner, self.path, e)
                newest = sys.maxsize
            self.max_ts = newest
        return self.max_ts
