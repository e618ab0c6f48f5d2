"""Compaction of a compacted file log queue (filelog.cleaner), on real files."""

from __future__ import annotations

from pathlib import Path

from filelog_parts import append, open_queue, values

from rstreams.runtime.queues.filelog import cleaner
from rstreams.runtime.queues.filelog.queue import Queue


def records(q: Queue) -> list[tuple[int, bytes | None, bytes | None]]:
    c = q.reader.read_columns(q.start, None)
    return list(zip(c.offsets, c.keys, c.values))


def test_compaction_keeps_the_latest_record_per_key_and_the_offsets(tmp_path: Path) -> None:
    q = open_queue(tmp_path, segment_bytes=120, compacted=True)
    append(q, None, key=b"gone", ts=0)  # an old tombstone
    for i in range(1, 9):
        append(q, b"v%d" % i, key=b"k%d" % (i % 2), ts=i)
    append(q, b"last", key=b"k0", ts=9)  # in the active segment
    segments_before = len(q.segments)
    removed = cleaner.compact(q, horizon=5)
    kept = records(q)
    # k1's latest (offset 7) stays; k0's latest is in the active segment, which is kept
    assert (7, b"k1", b"v7") in kept and (9, b"k0", b"last") in kept
    assert all(k != b"k1" or o == 7 for o, k, _ in kept)
    assert all(k != b"k0" or o == 9 or o >= q.bases[-1] for o, k, _ in kept)
    assert all(k != b"gone" for _, k, _ in kept)  # the tombstone is older than the horizon
    assert removed == 10 - len(kept)
    assert [o for o, _, _ in kept] == sorted(o for o, _, _ in kept)  # offsets kept, sparse
    assert len(q.segments) <= segments_before  # small neighbours merged
    assert not list(q.dir.glob("*.cleaned"))
    assert q.end == 10 and append(q, b"next", key=b"k2") == 10
    q.close()


def test_compaction_of_nothing_closed_removes_nothing(tmp_path: Path) -> None:
    q = open_queue(tmp_path, compacted=True)
    append(q, b"a", key=b"k")
    append(q, b"b", key=b"k")
    assert cleaner.compact(q, horizon=0) == 0
    assert values(q) == [b"a", b"b"]
    q.close()
