"""Compaction of a compacted topic's queue: keep the latest record per key.

The closed segments are read without the queue's mutex (with file descriptors of their
own), rewritten aside as ``.cleaned`` files (small neighbours merged) and renamed into
place, so readers are never blocked and never see a half-compacted segment. Offsets are
kept, so they become sparse.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rstreams.runtime.queues._files import _atomic_write, _fsync_dir, _write_all
from rstreams.runtime.queues._logformat import (
    FrameError,
    SparseIndex,
    build_frame,
    decode_frame,
    encode_records,
    frame_crc_ok,
    iter_frames,
)
from rstreams.runtime.queues.base import LogRecord

if TYPE_CHECKING:
    from rstreams.runtime.queues.filelog.queue import Queue


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
    q: Queue, sources: list[tuple[Path, int]], floor: list[int]
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
                raise q.corrupt(path, e.pos, e.reason) from None
        finally:
            os.close(fd)


def _latest_offsets(q: Queue, sources: list[tuple[Path, int]], start: int) -> dict[bytes, int]:
    """The offset of the latest record of every key in ``sources``."""
    latest: dict[bytes, int] = {}
    for batch in _batches_of(q, sources, [start - 1]):
        for r in batch:
            if r.key is not None:
                latest[r.key] = r.offset
    return latest


_Group = tuple[int, list[int], _SegmentWriter]  # (first base, merged bases, its writer)


def _rewrite(
    q: Queue, closed: list[tuple[int, Path]], latest: dict[bytes, int], start: int, horizon: int
) -> tuple[list[_Group], int]:
    """Write the kept records of the closed segments aside, merging small neighbours;
    (the groups written, the number of records removed)."""
    groups: list[_Group] = []
    removed = 0
    floor = [start - 1]
    writer: _SegmentWriter | None = None
    try:
        for b, p in closed:
            size = p.stat().st_size
            if writer is None or (writer.size and writer.size + size > q.topic.segment_bytes):
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
            w.finish(sync=q.sync)
    except BaseException:
        for _, _, w in groups:
            w.discard()
        raise
    return groups, removed


def compact(q: Queue, horizon: int) -> int:
    """Compact the closed segments of ``q``, dropping tombstones older than ``horizon``
    (ms) that are the latest of their key; the number of records removed."""
    with q.maint_lock:
        for stale in q.dir.glob("*.cleaned"):
            stale.unlink()
        with q.mutex, q.write_lock:
            q.refresh()
            q.catch_up(locked=True)
            closed = [(s.base, s.path) for s in q.segments[:-1]]
            active = q.segments[-1]
            active_part = (active.path, active.size)
            start = q.start
        if not closed:
            return 0
        latest = _latest_offsets(q, [(p, -1) for _, p in closed] + [active_part], start)
        groups, removed = _rewrite(q, closed, latest, start, horizon)
        with q.mutex:
            for first, members, w in groups:
                os.replace(w.log_tmp, q.segment_path(first))
                os.replace(w.index_tmp, q.segment_path(first).with_suffix(".index"))
                for b in members[1:]:
                    for p in (q.segment_path(b), q.segment_path(b).with_suffix(".index")):
                        with contextlib.suppress(FileNotFoundError):
                            p.unlink()
            if q.sync:
                _fsync_dir(q.dir)
            q.relist(locked=False)
    return removed
