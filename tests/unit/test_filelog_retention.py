"""Purge and retention of a file log queue (filelog.retention), on real files."""

from __future__ import annotations

from pathlib import Path

import pytest
from filelog_parts import append, open_queue, values

from rstreams.errors import ConfigError
from rstreams.runtime.queues.filelog import retention
from rstreams.runtime.queues.filelog.marks import START_FILE, parse_start


def test_purge_moves_the_start_and_deletes_whole_closed_segments(tmp_path: Path) -> None:
    q = open_queue(tmp_path, segment_bytes=150)
    for i in range(6):
        append(q, b"value-%d" % i)
    bases = list(q.bases)
    assert len(bases) >= 3
    retention.purge(q, bases[1] + 1)
    assert q.start == bases[1] + 1
    assert parse_start((q.dir / START_FILE).read_text()) == q.start
    assert q.bases == bases[1:]  # the segment holding the start stays
    assert not (q.dir / f"{bases[0]:020d}.log").exists()
    assert values(q, q.start)[0] == b"value-%d" % q.start
    with pytest.raises(ConfigError, match="was purged"):
        values(q, bases[1])
    retention.purge(q, 1)  # never moves back
    assert q.start == bases[1] + 1
    retention.purge(q, 100)  # at most to the end; the active segment stays
    assert q.start == 6 and len(q.segments) == 1
    q.close()


def test_retention_by_bytes_keeps_the_queue_that_big(tmp_path: Path) -> None:
    q = open_queue(tmp_path, segment_bytes=150, retention_bytes=200)
    for i in range(8):
        append(q, b"value-%d" % i)
    before = len(q.segments)
    deleted = retention.retain(q, now=0)
    assert deleted >= 1 and len(q.segments) == before - deleted
    assert sum(s.path.stat().st_size for s in q.segments) >= 200
    assert q.start == q.bases[0]
    q.close()


def test_retention_by_age_stops_at_the_first_segment_that_stays(tmp_path: Path) -> None:
    q = open_queue(tmp_path, segment_bytes=1, retention_ms=1000)  # a segment per frame
    for ts in (10, 20, 5000, 30, 40):  # a new record in the third segment
        append(q, b"value-%d" % ts, ts=ts)
    assert len(q.segments) == 5
    assert retention.retain(q, now=2000) == 2  # the third one is young: it and all after stay
    assert values(q, q.start)[0] == b"value-5000"
    closed = len(q.bases) - 1
    assert retention.retain(q, now=10_000) == closed  # all closed ones now
    assert len(q.segments) == 1
    q.close()
