"""A segment file of the file log (filelog.segment) and the queue's small state files
(filelog.marks), on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rstreams.runtime.queues._logformat import FrameError, build_frame, encode_batch
from rstreams.runtime.queues.filelog.marks import (
    below_durable,
    format_durable,
    format_start,
    parse_durable,
    parse_start,
)
from rstreams.runtime.queues.filelog.segment import Segment, list_bases, segment_path

INTERVAL = 1  # an index entry for every frame


def frame(base: int, *values: bytes) -> tuple[bytes, int]:
    batch = encode_batch([(i, None, v, ()) for i, v in enumerate(values)])
    assert batch is not None
    payload, count, max_ts = batch
    return build_frame(base, payload, count, count - 1, max_ts), count


def new_segment(qdir: Path, base: int = 0) -> Segment:
    qdir.mkdir(exist_ok=True)
    return Segment.create(qdir, base, INTERVAL)


def test_names_and_listing(tmp_path: Path) -> None:
    for base in (30, 0, 7):
        segment_path(tmp_path, base).touch()
    (tmp_path / f"{5:020d}.index").touch()
    (tmp_path / "durable-point").touch()
    assert segment_path(tmp_path, 7).name == "00000000000000000007.log"
    assert list_bases(tmp_path) == [0, 7, 30]


def test_write_frames_then_reopen_as_active_and_closed(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    for values in ([b"a", b"b"], [b"c"]):
        data, count = frame(seg.next_offset, *values)
        seg.write_frame(data, seg.next_offset, count, ())
    assert (seg.next_offset, seg.size) == (3, seg.path.stat().st_size)
    size = seg.size
    seg.close()

    active = Segment(0, seg.path)
    file_size, loaded = active.open_active(INTERVAL)
    assert (file_size, loaded) == (size, 1)  # whole: one entry (the first frame is implicit)
    # it starts from the last index entry; taking in the rest reaches the end
    assert active.next_offset == 2
    active.take_in(file_size)
    assert (active.next_offset, active.size) == (3, size)
    active.close()

    closed = Segment(0, seg.path)
    assert closed.open_closed(INTERVAL) is True
    assert closed.index is not None and list(closed.index.offsets) == [2]
    assert closed.newest_timestamp("t[0]") == 1
    assert not closed.replaced()
    closed.close()


def test_a_torn_tail_is_reported_and_truncated(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    data, count = frame(0, b"a")
    seg.write_frame(data, 0, count, ())
    whole = seg.size
    tail, _ = frame(1, b"b")
    with open(seg.path, "ab") as f:
        f.write(tail[:-3])  # a short write
    with pytest.raises(FrameError) as e:
        seg.take_in(seg.path.stat().st_size)
    assert e.value.pos == whole and e.value.incomplete
    seg.truncate(e.value.pos, sync=True)
    assert seg.path.stat().st_size == whole
    assert seg.next_offset == 1
    seg.close()


def test_a_frame_with_the_wrong_offset_is_refused(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    data, _ = frame(5, b"a")
    with open(seg.path, "ab") as f:
        f.write(data)
    with pytest.raises(FrameError, match="frame offset 5; expected 0"):
        seg.take_in(len(data))
    seg.close()


def test_a_damaged_index_is_rebuilt_from_the_frames(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    for v in (b"a", b"b", b"c"):
        data, count = frame(seg.next_offset, v)
        seg.write_frame(data, seg.next_offset, count, ())
    seg.close()
    seg.index_path.write_bytes(b"\x01\x02\x03")  # not whole entries
    closed = Segment(0, seg.path)
    assert closed.open_closed(INTERVAL) is False
    idx = closed.rebuild_index(INTERVAL)
    assert list(idx.offsets) == [1, 2] and closed.index is idx
    assert len(seg.index_path.read_bytes()) == 16 * 2  # saved
    closed.close()


def test_a_roll_refuses_a_file_that_has_data(tmp_path: Path) -> None:
    segment_path(tmp_path, 4).write_bytes(b"x")
    seg = Segment.create(tmp_path, 4, INTERVAL)
    assert seg.size == 1 and not seg.active  # the queue raises CorruptLogError
    os.close(seg.fd)


def test_a_replaced_file_is_noticed(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    seg.close()
    closed = Segment(0, seg.path)
    closed.open_closed(INTERVAL)
    tmp = tmp_path / "swap"
    tmp.write_bytes(b"")
    os.replace(tmp, seg.path)
    assert closed.replaced()
    closed.close()


def test_durable_and_start_marks_round_trip_and_refuse_damage() -> None:
    assert parse_durable(format_durable(3, 120, 9).decode()) == (3, 120, 9)
    with pytest.raises(ValueError, match="checksum"):
        parse_durable("3 120 9 1\n")
    assert parse_start(format_start(42).decode()) == 42
    assert parse_start("7\n") == 7  # as written before the crc
    with pytest.raises(ValueError):
        parse_start("7 8 9")
    assert below_durable((3, 120, 9), 0, 500)  # an earlier segment
    assert below_durable((3, 120, 9), 3, 119)
    assert not below_durable((3, 120, 9), 3, 120)
    assert not below_durable(None, 0, 0)
