"""Removing old records of a queue: purge (below an offset) and retention (by age/size).

Both move the queue's start offset first (``start-offset``, written atomically) and then
delete whole *closed* segments below it, holding the queue's ``maint.lock``; the active
segment is never deleted. Readers with a deleted file open keep reading it.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING

from rstreams.runtime.queues._files import _atomic_write, _fsync_dir
from rstreams.runtime.queues.filelog.marks import START_FILE, format_start

if TYPE_CHECKING:
    from rstreams.runtime.queues.filelog.queue import Queue
    from rstreams.runtime.queues.filelog.segment import Segment


def _set_start(q: Queue, start: int) -> None:
    if start > q.start:
        _atomic_write(q.dir / START_FILE, format_start(start), sync=q.sync)
        q.start = start


def _delete_segments(q: Queue, doomed: list[Segment]) -> None:
    for s in doomed:
        q.drop_closed(s)
        for p in (s.path, s.index_path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    if doomed:
        if q.sync:
            _fsync_dir(q.dir)
        q.relist(locked=False)


def purge(q: Queue, before: int) -> None:
    """Move the start offset to ``min(before, end)`` and delete the segments entirely
    below it."""
    with q.maint_lock, q.mutex:
        q.refresh()
        _set_start(q, min(before, q.end))
        doomed = [s for s, nxt in itertools.pairwise(q.segments) if nxt.base <= q.start]
        _delete_segments(q, doomed)


def _newest(q: Queue, seg: Segment) -> int | None:
    """The largest record timestamp of a closed segment; None if it has no records."""
    if seg.fd < 0:
        q.load_closed(seg)
    return seg.newest_timestamp(q.name)


def retain(q: Queue, now: int) -> int:
    """Delete the closed segments the topic's ``retention_ms``/``retention_bytes`` let
    go, oldest first, stopping at the first that stays; how many were deleted."""
    t = q.topic
    with q.maint_lock, q.mutex:
        q.refresh()
        sizes = [s.size if s.fd >= 0 else s.path.stat().st_size for s in q.segments]
        total = sum(sizes)
        doomed = []
        for s, size in zip(q.segments[:-1], sizes):
            if t.retention_bytes is not None and total - size >= t.retention_bytes:
                pass  # the queue stays big enough without it
            elif t.retention_ms is not None:
                newest = _newest(q, s)
                if newest is not None and newest >= now - t.retention_ms:
                    break
            else:
                break
            doomed.append(s)
            total -= size
        if doomed:
            _set_start(q, q.segments[len(doomed)].base)
            _delete_segments(q, doomed)
        return len(doomed)
