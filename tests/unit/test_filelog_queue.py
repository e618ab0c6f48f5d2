"""A queue of the file log (filelog.queue, with filelog.topic and filelog.reader): its
state, recovery on open, appends, rolls, flush and reads, on real files."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from filelog_parts import append, open_queue, values

from rstreams.errors import ConfigError
from rstreams.runtime.queues._files import CorruptLogError
from rstreams.runtime.queues.filelog.marks import DURABLE_FILE, parse_durable
from rstreams.runtime.queues.filelog.queue import Queue
from rstreams.runtime.queues.filelog.topic import Topic


def test_topic_meta_is_written_last_and_checked(tmp_path: Path) -> None:
    q = open_queue(tmp_path, segment_bytes=500)
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert (meta["name"], meta["queues"], meta["segment_bytes"]) == ("t", 1, 500)
    assert list(meta)[-1] == "crc"
    assert Topic.load("nope", tmp_path / "nope", tmp_path) is None
    meta["queues"] = 2  # without fixing the crc
    (tmp_path / "t" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CorruptLogError, match="metadata file is damaged"):
        Topic.load("t", tmp_path / "t", tmp_path)
    q.close()


def test_append_read_and_the_queue_state(tmp_path: Path) -> None:
    q = open_queue(tmp_path)
    assert (q.start, q.end, q.name) == (0, 0, "'t'[0]")
    assert append(q, b"a", b"b") == 0
    assert append(q, b"c") == 2
    assert q.end == 3 and q.unmarked and q.unsynced
    assert values(q) == [b"a", b"b", b"c"]
    assert values(q, 1) == [b"b", b"c"]
    assert list(q.reader.read_columns(0, 1).values) == [b"a"]
    assert list(q.reader.read_columns(3, None).values) == []
    q.close()


def test_flush_syncs_and_moves_the_durable_point(tmp_path: Path) -> None:
    q = open_queue(tmp_path)
    append(q, b"a")
    assert not (q.dir / DURABLE_FILE).exists()
    q.flush()
    assert not (q.unmarked or q.unsynced)
    assert parse_durable((q.dir / DURABLE_FILE).read_text())[2] == 1
    assert q.durable == parse_durable((q.dir / DURABLE_FILE).read_text())
    q.close()


def test_segments_roll_and_reads_cross_them(tmp_path: Path) -> None:
    q = open_queue(tmp_path, segment_bytes=150)
    for i in range(6):
        append(q, b"value-%d" % i)
    assert len(q.segments) > 1 and q.bases[0] == 0
    assert q.dir_unsynced  # (fsync="commit": the directory is synced by flush)
    assert values(q) == [b"value-%d" % i for i in range(6)]
    q.flush()
    q.close()
    again = open_queue(tmp_path)
    assert again.end == 6 and values(again, 4) == [b"value-4", b"value-5"]
    again.close()


def test_another_writer_on_the_same_files_is_taken_in(tmp_path: Path) -> None:
    mine, theirs = open_queue(tmp_path, segment_bytes=150), open_queue(tmp_path)
    append(mine, b"a")
    for i in range(5):
        append(theirs, b"theirs-%d" % i)  # rolls segments under "mine"
    assert append(mine, b"z") == 6
    assert values(mine)[:2] == [b"a", b"theirs-0"] and values(mine)[-1] == b"z"
    mine.close()
    theirs.close()


def test_open_truncates_a_torn_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    q = open_queue(tmp_path)
    append(q, b"a")
    q.close()
    seg = q.segments[-1].path
    with open(seg, "ab") as f:
        f.write(b"\x00garbage")
    with caplog.at_level(logging.WARNING, logger="rstreams.runtime.queues.filelog"):
        again = open_queue(tmp_path)
    assert "truncating the torn tail" in caplog.text
    assert again.end == 1 and seg.stat().st_size == again.segments[-1].size
    again.close()


def test_open_refuses_a_log_below_its_durable_point(tmp_path: Path) -> None:
    q = open_queue(tmp_path)
    append(q, b"a")
    append(q, b"b")
    q.flush()
    q.close()
    seg = q.segments[-1].path
    seg.write_bytes(b"")  # cut short by hand
    with pytest.raises(CorruptLogError, match=r"records 0\.\.1 are missing"):
        open_queue(tmp_path)


def test_open_refuses_a_log_below_a_committed_offset(tmp_path: Path) -> None:
    open_queue(tmp_path).close()
    topic = Topic.load("t", tmp_path / "t", tmp_path)
    assert topic is not None
    q = Queue(topic, 0, "commit", lambda q: None)
    with pytest.raises(CorruptLogError, match="group 'g' committed offset 3"):
        q.open([("g", 3)])


def test_a_read_below_the_start_is_refused(tmp_path: Path) -> None:
    q = open_queue(tmp_path)
    append(q, b"a", b"b")
    q.start = 1  # (as a purge leaves it)
    with pytest.raises(ConfigError, match="offset 0 of t\\[0\\] was purged"):
        values(q)
    q.close()


def test_the_reader_survives_a_stale_index(tmp_path: Path) -> None:
    q = open_queue(tmp_path, segment_bytes=150, index_interval_bytes=1)
    for i in range(6):
        append(q, b"v%d" % i)
    q.close()
    first = q.segments[0]
    first.index_path.write_bytes(first.index_path.read_bytes()[::-1])  # points nowhere
    again = open_queue(tmp_path)
    assert values(again, 1) == [b"v%d" % i for i in range(1, 6)]
    again.close()
