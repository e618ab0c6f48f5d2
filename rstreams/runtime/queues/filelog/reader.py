"""Reading a queue of the file log: records as columns, through the sparse indexes.

A :class:`Reader` belongs to one :class:`~.queue.Queue` and keeps its read cache (the
last decoded frame and the last block read). Readers take no lock across processes:
they see frames only up to the last whole, crc-valid one.
"""

from __future__ import annotations

import sys
from bisect import bisect_right
from typing import TYPE_CHECKING

from rstreams.runtime.queues._logformat import (
    FrameError,
    ReadBuffer,
    SparseIndex,
    decode_columns,
    find_frame_after,
    frame_crc_ok,
    iter_frames,
)
from rstreams.runtime.queues.base import RecordColumns

if TYPE_CHECKING:
    from rstreams.runtime.queues.filelog.queue import Queue
    from rstreams.runtime.queues.filelog.segment import Segment

_READ_BLOCK = 256 * 1024


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


class Reader:
    """Reads one queue (holding its ``mutex``); owns the queue's read cache."""

    def __init__(self, q: Queue) -> None:
        self.q = q
        # the last decoded frame: reads of fewer records than a batch decode it once
        self.cache_key: tuple[int, int] = (-1, -1)
        self.cache_columns = RecordColumns(range(0), [], [], [], [])
        # the last block read (of validated, so unchanging, bytes), for the next read
        self.buffer = ReadBuffer()

    def read_columns(self, offset: int, max_records: int | None) -> RecordColumns:
        """Records with offsets >= ``offset``, at most ``max_records``."""
        q = self.q
        out = _Collected(offset)
        with q.mutex:
            if offset < q.start:
                raise q.purged(offset)
            if max_records is not None and max_records <= 0:
                return out.columns()
            if offset >= q.end:
                q.refresh()
                if offset >= q.end:
                    return out.columns()
            limit = sys.maxsize if max_records is None else max_records
            self._read_retrying(offset, limit, out)
            if out.count < limit:  # short of what was asked: take in what others appended since
                known = q.end
                q.refresh()
                if q.end > known:
                    self._read_retrying(out.next_offset, limit, out)
            return out.columns()

    def _read_retrying(self, offset: int, limit: int, out: _Collected) -> None:
        for attempt in range(4):
            try:
                self._read_into(max(offset, out.next_offset), limit, out)
                return
            except FileNotFoundError:  # a segment was purged or merged by another process
                if attempt == 3:
                    raise
                self.q.relist(locked=False)
                if offset < self.q.start:
                    raise self.q.purged(offset) from None

    def _read_into(self, offset: int, limit: int, out: _Collected) -> None:
        q = self.q
        i = max(bisect_right(q.bases, offset) - 1, 0)
        segments = q.segments
        while i < len(segments) and out.count < limit:
            seg = segments[i]
            end = self._read_segment(seg, offset, limit, out)
            if (
                out.count < limit
                and i + 1 < len(segments)
                and end != segments[i + 1].base
                and not q.topic.compacted  # compaction may drop a segment's last records
            ):
                # A closed segment cut at a frame boundary reads cleanly but too short.
                raise q.corrupt(
                    seg.path, seg.size,
                    f"the segment ends at offset {end} but the next one starts at "
                    f"{segments[i + 1].base}: records {end}..{segments[i + 1].base - 1} are "
                    f"missing (the file was cut short)",
                    end,
                )  # fmt: skip
            offset = max(offset, out.next_offset)
            i += 1

    def _read_segment(self, seg: Segment, offset: int, limit: int, out: _Collected) -> int:
        """Append to ``out`` the records of ``seg`` with offsets >= ``offset``, up to ``limit``.

        Returns the offset after the last frame read (the segment's end when ``out`` did
        not fill up)."""
        q = self.q
        if seg.fd < 0:
            q.load_closed(seg)
        elif not seg.active:
            q.open_closed.move_to_end(seg.base)
        assert seg.index is not None
        idx = seg.index
        for attempt in (0, 1):
            k = bisect_right(idx.offsets, offset) - 1
            pos, expect = (idx.positions[k], idx.offsets[k]) if k >= 0 else (0, seg.base)
            try:
                return self._read_frames(seg, pos, expect if k >= 0 else -1, offset, limit, out)
            except _StaleIndex:
                if attempt:
                    break
                if seg.active:
                    seg.index = SparseIndex.scan(seg.fd, seg.size, q.topic.index_interval)
                else:
                    q.rebuild_closed_index(seg)
                assert seg.index is not None
                idx = seg.index
        raise q.corrupt(seg.path, 0, "unusable index")

    def _read_frames(
        self, seg: Segment, pos: int, expect: int, offset: int, limit: int, out: _Collected
    ) -> int:
        at = expect if expect >= 0 else seg.base  # offset of the next frame
        try:
            buffer = self.buffer.use(seg.gen)
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
                if key == self.cache_key:
                    columns = self.cache_columns
                else:
                    if not frame_crc_ok(frame, crc):
                        raise FrameError(fpos, "crc mismatch")
                    try:
                        columns = decode_columns(frame, base, count, last_delta)
                    except FrameError as e:
                        raise FrameError(fpos, e.reason) from None
                    self.cache_key, self.cache_columns = key, columns
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
            raise self.q.corrupt(seg.path, e.pos, reason, at) from None
        return at
