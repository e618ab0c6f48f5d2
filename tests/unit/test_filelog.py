"""The file-backed log broker: format, segments, index, recovery, purge, retention, compaction."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstreams.errors import ConfigError
from rstreams.runtime.queues import (
    CorruptLogError,
    FileBroker,
    LogRecord,
    MemoryBroker,
    filelog,
    offsets,
)
from rstreams.runtime.queues import _logformat as fmt
from rstreams.runtime.queues.filelog import queue as filelog_queue
from rstreams.runtime.queues.filelog import segment as filelog_segment

Record = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]
Value = bytes | None
Opener = Callable[..., FileBroker]


def rec(value: bytes | None, ts: int = 0, key: bytes | None = None, headers: tuple = ()) -> Record:
    return (ts, key, value, headers)


def as_tuples(records: list[LogRecord]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


def qdir(root: Path, topic: str = "t", queue: int = 0) -> Path:
    return root / "topics" / topic / str(queue)


def logs(root: Path, topic: str = "t", queue: int = 0) -> list[Path]:
    return sorted(qdir(root, topic, queue).glob("*.log"))


def frames(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, end position) of each frame of a segment file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size
        return [(p, b, stop) for p, b, _n, _l, _t, stop, _c, _f in fmt.iter_frames(fd, 0, end)]
    except fmt.FrameError:
        raise AssertionError(f"{path} does not parse") from None
    finally:
        os.close(fd)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "log"


@pytest.fixture
def open_broker(root: Path) -> Iterator[Callable[..., FileBroker]]:
    """Open brokers on ``root`` (closed at the end of the test)."""
    opened: list[FileBroker] = []

    def make(**kwargs: object) -> FileBroker:
        b = FileBroker(root, **kwargs)  # type: ignore[arg-type]
        opened.append(b)
        return b

    yield make
    for b in opened:
        b.close()


@pytest.fixture
def broker(open_broker: Callable[..., FileBroker]) -> FileBroker:
    b = open_broker()
    b.create_topic("t", 2)
    return b


# -- the MemoryBroker contract, checked on both brokers -------------------------------------


@pytest.fixture(params=["memory", "file"])
def any_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryBroker]:
    if request.param == "memory":
        yield MemoryBroker()
    else:
        with FileBroker(tmp_path / "log") as b:
            yield b  # type: ignore[misc]


def test_same_contract_as_the_memory_broker(any_broker: MemoryBroker) -> None:
    b = any_broker
    assert b.queue_count("t") is None
    b.create_topic("t", 2)
    b.create_topic("t", 2)  # idempotent
    assert b.queue_count("t") == 2
    with pytest.raises(ConfigError, match="exists with 2 queues"):
        b.create_topic("t", 3)
    with pytest.raises(ConfigError, match="at least one queue"):
        b.create_topic("u", 0)
    with pytest.raises(ConfigError, match="does not exist"):
        b.append("nope", 0, [rec(b"a")])
    with pytest.raises(ConfigError, match="has no queue 2"):
        b.read("t", 2, 0)
    assert b.append("t", 0, [rec(b"a"), rec(b"b")]) == 0
    assert b.append("t", 1, [rec(b"x")]) == 0
    assert b.append("t", 0, [rec(b"c")]) == 2
    assert b.append("t", 0, []) == 3
    assert b.append("t", 0, iter([rec(b"d")])) == 3  # any iterable
    assert [r.offset for r in b.read("t", 0, 0)] == [0, 1, 2, 3]
    assert [r.value for r in b.read("t", 0, 1, max_records=2)] == [b"b", b"c"]
    assert b.read("t", 0, 0, max_records=0) == []
    assert b.read("t", 0, 4) == [] and b.read("t", 0, 99) == []
    assert (b.start_offset("t", 0), b.end_offset("t", 0), b.end_offset("t", 1)) == (0, 4, 1)
    b.purge("t", 0, 2)
    assert b.start_offset("t", 0) == 2
    with pytest.raises(ConfigError, match="was purged; the queue starts at 2"):
        b.read("t", 0, 1)
    b.purge("t", 0, 1)  # already purged: no-op
    b.purge("t", 0, 99)  # beyond the end: up to the end
    assert b.start_offset("t", 0) == b.end_offset("t", 0) == 4
    assert b.append("t", 0, [rec(b"e")]) == 4
    assert b.committed("g", "t", 0) == 0
    b.commit("g", "t", 0, 3)
    assert b.committed("g", "t", 0) == 3


# -- records and offsets ----------------------------------------------------------------


def test_records_round_trip_with_none_empty_and_headers(broker: FileBroker) -> None:
    batch = [
        (1, None, None, ()),
        (2, b"", b"", ()),
        (3, b"k", None, (("a", b""), ("b", b"\x00\xff"), ("a", b"again"))),
        (-5, None, b"v" * 70_000, (("\u00e9t\u00e9", b"x"),)),
        (2**62, b"\x00" * 3, b"\n", ()),
    ]
    assert broker.append("t", 1, batch) == 0
    got = broker.read("t", 1, 0)
    assert as_tuples(got) == [(i, *r) for i, r in enumerate(batch)]
    assert got[0].key is None and got[1].key == b"" and got[0].value is None and got[1].value == b""
    assert all(type(r.key) in (bytes, type(None)) for r in got)
    assert isinstance(got[2].headers, tuple) and isinstance(got[2].headers[0], tuple)


def test_bad_records_are_refused_before_anything_is_written(broker: FileBroker) -> None:
    with pytest.raises(TypeError, match="timestamp"):
        broker.append("t", 0, [(1.5, None, b"v", ())])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="records must be"):
        broker.append("t", 0, [(1, None, object(), ())])  # type: ignore[list-item]
    assert broker.end_offset("t", 0) == 0


def test_offsets_are_dense_per_queue_and_one_append_is_one_frame(
    broker: FileBroker, root: Path
) -> None:
    for n in (1, 5, 3):
        broker.append("t", 0, [rec(b"x")] * n)
    broker.append("t", 1, [rec(b"y")] * 2)
    assert [r.offset for r in broker.read("t", 0, 0)] == list(range(9))
    assert [r.offset for r in broker.read("t", 1, 0)] == [0, 1]
    assert [b for _, b, _ in frames(logs(root)[0])] == [0, 1, 6]


def test_reads_of_fewer_records_than_a_batch(broker: FileBroker) -> None:
    broker.append("t", 0, [rec(bytes([i])) for i in range(100)])
    got, pos = [], 0
    while chunk := broker.read("t", 0, pos, max_records=7):
        got += chunk
        pos = chunk[-1].offset + 1
    assert [r.value for r in got] == [bytes([i]) for i in range(100)]


def test_names_that_are_not_file_names(open_broker: Opener, root: Path) -> None:
    b = open_broker()
    names = ["a/b", "..", ".hidden", "sp ace%", "\u00fcml"]
    for n in names:
        b.create_topic(n, 1)
        b.append(n, 0, [rec(n.encode())])
        b.commit(n, n, 0, 1)
    assert sorted(b.topics()) == sorted(names)
    assert sorted(b.groups()) == sorted(names)
    assert {p.name for p in (root / "topics").iterdir() if not p.name.startswith(".")} == {
        "a%2Fb", "%2E.", "%2Ehidden", "sp%20ace%25", "%C3%BCml",
    }  # fmt: skip
    c = open_broker()
    assert [c.read(n, 0, 0)[0].value for n in names] == [n.encode() for n in names]
    assert c.group_offsets("a/b") == {("a/b", 0): 1}


def test_invalid_options_are_config_errors(root: Path) -> None:
    with pytest.raises(ConfigError, match="fsync must be one of"):
        FileBroker(root, fsync="sometimes")
    with pytest.raises(ConfigError, match="positive"):
        FileBroker(root, segment_bytes=0)
    with FileBroker(root) as b, pytest.raises(ConfigError, match="retention_ms"):
        b.create_topic("t", 1, retention_ms=-1)
    with pytest.raises(ConfigError, match="closed"):
        b.append("t", 0, [])


# -- segments and index ---------------------------------------------------------------------


def test_segments_roll_and_reads_cross_them(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker(segment_bytes=1000, index_interval_bytes=100)
    b.create_topic("t", 1)
    values = [bytes([i % 256]) * (i % 50) for i in range(600)]
    for i in range(0, 600, 6):
        b.append("t", 0, [rec(v, ts=i) for v in values[i : i + 6]])
    segs = logs(root)
    assert len(segs) > 10
    assert all(s.stat().st_size <= 1000 for s in segs)
    bases = [int(s.stem) for s in segs]
    assert bases == sorted(bases) and bases[0] == 0
    assert frames(segs[3])[0][1] == bases[3]  # named after its first offset
    assert [r.value for r in b.read("t", 0, 0)] == values
    for start in (0, 1, 5, 6, 7, 299, 300, 595, 599):
        for n in (1, 5, 13, 100, None):
            want = values[start : None if n is None else start + n]
            assert [r.value for r in b.read("t", 0, start, n)] == want, (start, n)
    idx = segs[0].with_suffix(".index").read_bytes()
    assert len(idx) % 16 == 0 and len(idx) >= 16  # sparse entries every ~100 bytes


def test_one_batch_bigger_than_a_segment_gets_its_own(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker(segment_bytes=200)
    b.create_topic("t", 1)
    b.append("t", 0, [rec(b"a")])
    b.append("t", 0, [rec(b"x" * 1000)])
    b.append("t", 0, [rec(b"b")])
    assert [s.name for s in logs(root)] == [f"{i:020d}.log" for i in (0, 1, 2)]
    assert [r.value for r in b.read("t", 0, 0)] == [b"a", b"x" * 1000, b"b"]


def test_missing_or_stale_index_is_rebuilt(
    open_broker: Callable[..., FileBroker], root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    b = open_broker(segment_bytes=2000, index_interval_bytes=64)
    b.create_topic("t", 1)
    for i in range(100):
        b.append("t", 0, [rec(b"%d" % i, ts=i), rec(b"-", ts=i)])
    b.close()
    indexes = sorted(qdir(root).glob("*.index"))
    assert len(indexes) >= 3
    good = indexes[0].read_bytes()
    indexes[0].unlink()  # missing
    indexes[1].write_bytes(fmt.INDEX_ENTRY.pack(5, 3) + fmt.INDEX_ENTRY.pack(9, 77))  # lies
    indexes[-1].write_bytes(b"\x01\x02\x03")  # the active one: garbage
    c = open_broker()
    with caplog.at_level(logging.INFO, logger=filelog.__name__):
        got = c.read("t", 0, 0)
        assert [r.value for r in got[::2]] == [b"%d" % i for i in range(100)]
        assert [r.offset for r in c.read("t", 0, 77, 3)] == [77, 78, 79]
        for off in range(0, 200, 13):
            assert c.read("t", 0, off, 1)[0].offset == off
    assert indexes[0].read_bytes() == good  # rebuilt by the same rule
    assert len(indexes[-1].read_bytes()) % 16 == 0
    assert "rebuilt the index" in caplog.text


def test_reopen_keeps_records_config_start_and_offsets(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker(segment_bytes=500)
    b.create_topic("t", 3, retention_bytes=10_000)
    b.create_topic("c", 1, compacted=True)
    for i in range(50):
        b.append("t", i % 3, [rec(b"%d" % i, key=b"k")])
    b.purge("t", 0, 4)
    b.commit("g", "t", 2, 7)
    b.close()
    c = open_broker(segment_bytes=99)  # defaults for new topics only
    assert c.topics() == {"t": 3, "c": 1}
    meta = json.loads((root / "topics" / "t" / "meta.json").read_text())
    assert meta["segment_bytes"] == 500 and meta["retention_bytes"] == 10_000
    assert json.loads((root / "topics" / "c" / "meta.json").read_text())["compacted"] is True
    assert c.start_offset("t", 0) == 4
    assert [r.value for r in c.read("t", 1, 0)] == [b"%d" % i for i in range(1, 50, 3)]
    assert (c.end_offset("t", 0), c.committed("g", "t", 2)) == (17, 7)
    assert c.append("t", 0, [rec(b"new")]) == 17


# -- crash recovery -------------------------------------------------------------------------


def _fill(b: FileBroker, batches: int = 5) -> list[bytes]:
    b.create_topic("t", 1)
    values = []
    for i in range(batches):
        vs = [b"batch%d-%d" % (i, j) for j in range(3)]
        b.append("t", 0, [rec(v) for v in vs])
        values += vs
    return values


@pytest.mark.parametrize(
    "damage",
    ["half frame", "garbage", "zeros", "header only", "bad crc of an unsynced last frame"],
)
def test_torn_tail_is_truncated_on_reopen(
    open_broker: Callable[..., FileBroker],
    root: Path,
    caplog: pytest.LogCaptureFixture,
    damage: str,
) -> None:
    b = open_broker()
    values = _fill(b)
    b.close()
    seg = logs(root)[-1]
    good = seg.read_bytes()
    frame = fmt.build_frame(15, fmt.encode_batch([rec(b"lost")])[0], 1, 0, 0)  # type: ignore[index]
    damaged = {
        "half frame": good + frame[: len(frame) // 2],
        "garbage": good + b"\x13\x37 not a frame at all" * 5,
        "zeros": good + bytes(4096),
        "header only": good + frame[: fmt.HEADER_SIZE],
        "bad crc of an unsynced last frame": good + frame[:-1] + bytes([frame[-1] ^ 0x55]),
    }[damage]
    seg.write_bytes(damaged)
    c = open_broker()
    with caplog.at_level(logging.WARNING, logger=filelog.__name__):
        end = c.end_offset("t", 0)
    assert "truncating the torn tail" in caplog.text and str(seg) in caplog.text
    assert end == 15 and seg.read_bytes() == good
    assert [r.value for r in c.read("t", 0, 0)] == values
    assert c.append("t", 0, [rec(b"after")]) == end
    assert [r.value for r in open_broker().read("t", 0, 0)] == [*values, b"after"]


@pytest.mark.parametrize("damage", ["flip in the last frame", "cut inside the last frame"])
def test_damage_below_the_durable_point_is_not_a_torn_tail(
    open_broker: Callable[..., FileBroker], root: Path, damage: str
) -> None:
    """The last frame was synced (close flushes): damaging it is corruption, reported
    with the offset it holds, never truncated away."""
    b = open_broker()
    _fill(b)
    b.close()
    seg = logs(root)[-1]
    good = seg.read_bytes()
    last_pos = frames(seg)[-1][0]
    if damage == "flip in the last frame":
        seg.write_bytes(good[:-1] + bytes([good[-1] ^ 0x55]))
    else:
        seg.write_bytes(good[: last_pos + 40])
    c = open_broker()
    with pytest.raises(
        CorruptLogError, match=r"at byte \d+ \(offset 12\): .*not a torn write"
    ) as err:
        c.end_offset("t", 0)
    assert err.value.offset == 12 and err.value.position == last_pos
    assert "rstreams topics repair t --queue 0 --truncate-at 12" in str(err.value)
    assert seg.stat().st_size == (len(good) if damage.startswith("flip") else last_pos + 40)


def test_a_log_cut_at_a_frame_boundary_or_missing_segments_is_refused(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker()
    _fill(b)
    b.close()
    seg = logs(root)[-1]
    seg.write_bytes(seg.read_bytes()[: frames(seg)[-1][0]])  # whole frames, one fewer
    with pytest.raises(CorruptLogError, match=r"ends at offset 12 but offsets up to 14 were"):
        open_broker().end_offset("t", 0)


def test_a_log_that_ends_below_a_committed_offset_is_refused(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker()
    _fill(b)
    b.commit("g", "t", 0, 15)
    b.close()
    (root / "topics" / "t" / "0" / filelog.DURABLE_FILE).unlink()  # only the group knows
    seg = logs(root)[-1]
    seg.write_bytes(seg.read_bytes()[: frames(seg)[1][0]])
    with pytest.raises(
        CorruptLogError, match=r"ends at offset 3 but group 'g' committed offset 15"
    ):
        open_broker().append("t", 0, [rec(b"would reuse offset 3")])


def test_a_closed_segment_cut_short_is_refused(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker(segment_bytes=120)  # a segment per batch or so
    values = _fill(b, batches=6)
    b.close()
    closed = logs(root)[0]
    assert len(logs(root)) > 2
    c = open_broker(segment_bytes=120)
    assert [r.value for r in c.read("t", 0, 0)] == values
    c.close()
    first = frames(closed)
    closed.write_bytes(closed.read_bytes()[: first[-1][0]] if len(first) > 1 else b"")
    d = open_broker(segment_bytes=120)
    with pytest.raises(CorruptLogError, match=r"the segment ends at offset \d+ but the next one"):
        d.read("t", 0, 0)


@pytest.mark.parametrize("what", ["offset file", "meta.json", "durable point"])
def test_damaged_small_files_are_errors_not_zeros(
    open_broker: Callable[..., FileBroker], root: Path, what: str
) -> None:
    b = open_broker()
    _fill(b)
    b.commit("g", "t", 0, 15)
    b.close()
    path = {
        "offset file": root / "groups" / "g" / "t" / "0.json",
        "meta.json": root / "topics" / "t" / "meta.json",
        "durable point": root / "topics" / "t" / "0" / filelog.DURABLE_FILE,
    }[what]
    data = path.read_bytes()
    digit = next(i for i, ch in enumerate(data) if chr(ch).isdigit())
    path.write_bytes(
        data[:digit] + (b"9" if data[digit : digit + 1] != b"9" else b"8") + data[digit + 1 :]
    )
    c = open_broker()
    with pytest.raises(CorruptLogError, match="damaged") as err:
        c.committed("g", "t", 0)
        c.end_offset("t", 0)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("where", ["payload", "header"])
def test_corruption_in_the_middle_of_a_segment_raises(
    open_broker: Callable[..., FileBroker], root: Path, where: str
) -> None:
    b = open_broker(segment_bytes=400)
    _fill(b, batches=12)
    b.close()
    segs = logs(root)
    assert len(segs) >= 3
    for seg in (segs[0], segs[-1]):  # a closed segment and the active one
        pos, _base, stop = frames(seg)[1]
        data = bytearray(seg.read_bytes())
        data[stop - 3 if where == "payload" else pos + 20] ^= 0xFF
        seg.write_bytes(bytes(data))
    c = open_broker()
    with pytest.raises(CorruptLogError) as err:  # the active segment: at first access
        c.end_offset("t", 0)
    e = err.value
    assert (e.topic, e.queue, e.segment, e.position) == ("t", 0, str(segs[-1]), pos)
    msg = str(e)
    assert "'t'[0]" in msg and str(segs[-1]) in msg and f"byte {pos}" in msg
    assert "valid frame follows" in msg
    assert segs[-1].read_bytes() == bytes(data)  # nothing was truncated away


def test_corruption_in_a_closed_segment_raises_on_read(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker(segment_bytes=400)
    values = _fill(b, batches=12)
    b.close()
    seg = logs(root)[0]
    pos, base, stop = frames(seg)[1]
    data = bytearray(seg.read_bytes())
    data[stop - 2] ^= 0x01
    seg.write_bytes(bytes(data))
    c = open_broker()
    assert [r.value for r in c.read("t", 0, 0, 3)] == values[:3]  # before the damage: fine
    where = rf"{seg.name} at byte {pos} \(offset {base}\): crc mismatch"
    with pytest.raises(CorruptLogError, match=where):
        c.read("t", 0, base)
    later = int(logs(root)[1].stem)
    assert [r.value for r in c.read("t", 0, later)] == values[later:]


def test_crash_between_roll_and_first_write_leaves_a_usable_empty_segment(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker()
    values = _fill(b)
    b.close()
    (qdir(root) / f"{15:020d}.log").touch()
    c = open_broker()
    assert c.end_offset("t", 0) == 15
    assert c.append("t", 0, [rec(b"x")]) == 15
    assert [r.value for r in c.read("t", 0, 0)] == [*values, b"x"]


# -- two brokers on one directory (as two processes) ----------------------------------------


def test_two_brokers_append_densely_and_see_each_other(
    open_broker: Callable[..., FileBroker],
) -> None:
    a, b = open_broker(segment_bytes=300), open_broker(segment_bytes=300)
    a.create_topic("t", 1)
    expected = []
    for i in range(60):
        w = b if i % 3 == 0 else a
        v = b"%d" % i
        assert w.append("t", 0, [rec(v), rec(v)]) == 2 * i
        expected += [v, v]
    for r in (a, b, open_broker()):
        assert [x.value for x in r.read("t", 0, 0)] == expected
        assert r.end_offset("t", 0) == 120


def test_an_incomplete_frame_is_invisible_to_readers_not_an_error(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    writer, reader = open_broker(), open_broker()
    writer.create_topic("t", 1)
    writer.append("t", 0, [rec(b"a")])
    assert reader.end_offset("t", 0) == 1
    frame = fmt.build_frame(1, fmt.encode_batch([rec(b"b"), rec(b"c")])[0], 2, 1, 0)  # type: ignore[index]
    seg = logs(root)[-1]
    with open(seg, "ab") as f:  # a writer in the middle of its write()
        f.write(frame[:10])
        f.flush()
        assert reader.end_offset("t", 0) == 1
        f.write(frame[10:-1])
        f.flush()
        assert reader.read("t", 0, 0) == reader.read("t", 0, 0, 5)
        assert [r.value for r in reader.read("t", 0, 0)] == [b"a"]
        f.write(frame[-1:])
    assert reader.end_offset("t", 0) == 3
    assert [r.value for r in reader.read("t", 0, 1)] == [b"b", b"c"]


def test_threads_share_one_broker(broker: FileBroker) -> None:
    def work(tid: int) -> None:
        for i in range(50):
            broker.append("t", 0, [rec(b"%d-%d" % (tid, i))] * 2)
            broker.read("t", 0, max(broker.end_offset("t", 0) - 5, 0))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = broker.read("t", 0, 0)
    assert [r.offset for r in got] == list(range(400))
    assert sorted(set(r.value for r in got)) == sorted(
        b"%d-%d" % (t, i) for t in range(4) for i in range(50)
    )


def test_a_purge_by_another_broker_is_seen(open_broker: Opener, root: Path) -> None:
    a = open_broker(segment_bytes=300)
    _fill(a, batches=20)
    b = open_broker()
    assert b.end_offset("t", 0) == 60
    a.purge("t", 0, 30)
    assert b.start_offset("t", 0) == 30
    with pytest.raises(ConfigError, match="purged"):
        b.read("t", 0, 0)
    assert b.read("t", 0, 30, 1)[0].offset == 30


def test_a_stale_directory_listing_is_listed_again(
    open_broker: Opener, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment listed as last may be rolled past and compacted away before it is opened."""
    a = open_broker()
    values = _fill(a)
    b = open_broker()
    assert b.end_offset("t", 0) == 15
    real = os.listdir
    stale = [f"{99:020d}.log"]  # gone by the time it is opened

    def listdir(path: object) -> list[str]:
        return real(path) + ([stale.pop()] if stale else [])  # type: ignore[arg-type]

    monkeypatch.setattr(os, "listdir", listdir)
    (qdir(root) / "x").touch()  # the directory changed: the reader lists it again
    assert [r.value for r in b.read("t", 0, 0)] == values
    assert b.end_offset("t", 0) == 15 and not stale


# -- purge, retention -----------------------------------------------------------------------


def test_purge_deletes_whole_segments_below_and_persists_start(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker(segment_bytes=300)
    values = _fill(b, batches=20)
    before = logs(root)
    cut = int(before[3].stem) + 1  # inside segment 3
    b.purge("t", 0, cut)
    assert logs(root) == before[3:]
    assert b.start_offset("t", 0) == cut
    assert (qdir(root) / "start-offset").read_text().split()[0] == str(cut)
    with pytest.raises(ConfigError, match="purged"):
        b.read("t", 0, cut - 1)
    assert [r.value for r in b.read("t", 0, cut)] == values[cut:]
    b.purge("t", 0, 10**9)  # never the active segment
    assert logs(root) == before[-1:]
    assert b.start_offset("t", 0) == b.end_offset("t", 0) == len(values)
    c = open_broker()
    assert (c.start_offset("t", 0), c.end_offset("t", 0)) == (len(values), len(values))
    assert c.append("t", 0, [rec(b"z")]) == len(values)


def test_retention_by_bytes_and_by_time(open_broker: Opener, root: Path) -> None:
    b = open_broker(segment_bytes=300)
    b.create_topic("big", 1, retention_bytes=1000)
    b.create_topic("old", 1, retention_ms=1000)
    b.create_topic("kept", 1)
    for i in range(40):
        for t in ("big", "old", "kept"):
            b.append(t, 0, [rec(b"%03d" % i, ts=i * 100), rec(b"-", ts=i * 100)])
    n_big, n_old = len(logs(root, "big")), len(logs(root, "old"))
    assert b.enforce_retention(now_ms=2500) > 0
    big = logs(root, "big")
    assert sum(p.stat().st_size for p in big) >= 1000
    assert sum(p.stat().st_size for p in big[1:]) < 1000 and len(big) < n_big
    assert b.start_offset("big", 0) == int(big[0].stem)
    old = logs(root, "old")
    assert len(old) < n_old
    first = b.read("old", 0, b.start_offset("old", 0))
    assert first[0].timestamp > 2500 - 1000 - 300  # whole segments: a little may stay
    with pytest.raises(ConfigError, match="purged"):
        b.read("old", 0, 0)
    assert len(b.read("kept", 0, 0)) == 80
    assert b.enforce_retention(now_ms=2500) == 0  # idempotent
    assert b.enforce_retention(now_ms=10**9) > 0  # everything closed is old now
    assert len(logs(root, "old")) == 1


# -- compaction -----------------------------------------------------------------------------


def _changelog(
    b: FileBroker, n: int = 300, keys: int = 10
) -> dict[bytes, tuple[int, bytes | None]]:
    b.create_topic("c", 1, compacted=True)
    latest: dict[bytes, tuple[int, Value]] = {}
    for i in range(0, n, 3):
        batch = []
        for j in range(i, i + 3):
            k = b"k%d" % (j % keys)
            v = None if j % 7 == 0 else b"v%d" % j
            batch.append(rec(v, ts=j, key=k))
            latest[k] = (j, v)
        b.append("c", 0, batch)
    return latest


def test_compaction_keeps_the_latest_per_key_with_offsets(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker(segment_bytes=400)
    latest = _changelog(b)
    b.append("c", 0, [rec(b"no key"), rec(b"again no key")])
    active_before = logs(root, "c")[-1].read_bytes()
    n_before = len(logs(root, "c"))
    end = b.end_offset("c", 0)
    removed = b.compact("c", 0, tombstone_retention_ms=10**12, now_ms=0)
    after = b.read("c", 0, 0)
    assert removed > 200 and len(after) == end - removed
    assert logs(root, "c")[-1].read_bytes() == active_before  # the active segment is untouched
    assert len(logs(root, "c")) < n_before  # small neighbours merged
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets))
    closed_keys = [r.key for r in after if r.offset < int(logs(root, "c")[-1].stem)]
    assert len(closed_keys) == len(set(closed_keys))  # one per key in the closed part
    table = {r.key: (r.offset, r.value) for r in after if r.key is not None}
    assert table == latest  # tombstones younger than their retention stay
    assert [r.value for r in after if r.key is None] == [b"no key", b"again no key"]
    assert b.end_offset("c", 0) == end
    gaps = [o for o in range(end) if o not in set(offsets)]
    for gap in gaps[:: max(len(gaps) // 10, 1)]:  # sparse: the next one at or after
        assert b.read("c", 0, gap, 2)[0].offset == min(o for o in offsets if o > gap)
    assert as_tuples(open_broker().read("c", 0, 0)) == as_tuples(after)  # durable, reopenable


def test_compaction_drops_old_tombstones_and_can_run_again(
    open_broker: Callable[..., FileBroker],
) -> None:
    b = open_broker(segment_bytes=400)
    latest = _changelog(b)
    b.append("c", 0, [rec(b"tail", key=b"z")] * 40)  # pushes every key into closed segments
    b.append("c", 0, [rec(b"roll", key=b"z")])
    b.compact("c", 0, tombstone_retention_ms=0, now_ms=10**6)
    table = {r.key: r.value for r in b.read("c", 0, 0)}
    live = {k: v for k, (_, v) in latest.items() if v is not None}
    assert {k: v for k, v in table.items() if k != b"z"} == live
    assert None not in table.values()
    assert b.compact("c", 0, tombstone_retention_ms=0, now_ms=10**6) == 0
    with pytest.raises(ConfigError, match="not compacted"):
        b.create_topic("plain", 1)
        b.compact("plain", 0)


def test_readers_see_a_consistent_log_across_compaction(
    open_broker: Callable[..., FileBroker],
) -> None:
    b = open_broker(segment_bytes=300)
    latest = _changelog(b, n=600, keys=7)
    other = open_broker()  # as another process, reading before, during and after
    first = other.read("c", 0, 0, 50)
    pos = first[-1].offset + 1
    b.compact("c", 0, tombstone_retention_ms=10**12, now_ms=0)
    rest = other.read("c", 0, pos)  # its open files still hold the old segments
    seen = first + rest
    offsets = [r.offset for r in seen]
    assert offsets == sorted(set(offsets)) and offsets[-1] == b.end_offset("c", 0) - 1
    assert {r.key: (r.offset, r.value) for r in seen} == latest
    assert as_tuples(other.read("c", 0, 0)) == as_tuples(b.read("c", 0, 0))


def test_an_interrupted_compaction_is_harmless(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker(segment_bytes=300)
    latest = _changelog(b)
    segs = logs(root, "c")
    before = as_tuples(b.read("c", 0, 0))
    # crash after the merged segment replaced the first one, before the rest was deleted
    copy = {p: p.read_bytes() for p in segs[1:3]}
    b.compact("c", 0, tombstone_retention_ms=10**12, now_ms=0)
    for p, data in copy.items():
        p.write_bytes(data)
    (qdir(root, "c") / "00000000000000000000.log.cleaned").write_bytes(b"half")
    c = open_broker()
    got = as_tuples(c.read("c", 0, 0))
    offsets = [r[0] for r in got]
    assert offsets == sorted(set(offsets))
    assert {r[2]: (r[0], r[3]) for r in got} == latest
    assert set(got) <= set(before)
    c.compact("c", 0, tombstone_retention_ms=10**12, now_ms=0)
    assert not list(qdir(root, "c").glob("*.cleaned"))
    assert {r.key: (r.offset, r.value) for r in c.read("c", 0, 0)} == latest


# -- groups and durability --------------------------------------------------------------------


def test_committed_offsets_are_durable_files(
    open_broker: Callable[..., FileBroker], root: Path
) -> None:
    b = open_broker()
    b.create_topic("t", 2)
    b.commit("g1", "t", 0, 5)
    b.commit("g1", "t", 1, 7)
    b.commit("g1", "t", 1, 8)
    b.commit("g2", "t", 0, 1)
    b.close()
    doc = json.loads((root / "groups" / "g1" / "t" / "1.json").read_text())
    assert doc == {"group": "g1", "topic": "t", "queue": 1, "offset": 8, "crc": doc["crc"]}
    assert doc["crc"] == zlib.crc32(b"g1\0t\x001\x008")  # a flipped digit cannot pass
    assert not [p for p in (root / "groups").rglob("*") if p.name.endswith(".tmp")]
    c = open_broker()
    assert c.groups() == ["g1", "g2"]
    assert c.group_offsets("g1") == {("t", 0): 5, ("t", 1): 8}
    assert c.group_offsets("nobody") == {}
    assert (c.committed("g1", "t", 1), c.committed("g2", "t", 1)) == (8, 0)


@pytest.mark.parametrize(
    ("policy", "after_append", "after_flush", "after_commit"),
    [("always", 1, 1, 2), ("commit", 0, 1, 2), ("never", 0, 0, 0)],
)
def test_fsync_policy(
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
    policy: str,
    after_append: int,
    after_flush: int,
    after_commit: int,
) -> None:
    with FileBroker(root, fsync=policy) as b:
        b.create_topic("t", 1)
        data_syncs: list[int] = []
        all_syncs: list[int] = []
        monkeypatch.setattr(filelog_segment, "_fdatasync", data_syncs.append)
        monkeypatch.setattr(os, "fsync", all_syncs.append)
        b.append("t", 0, [rec(b"a")])
        assert len(data_syncs) == after_append
        b.flush()
        b.flush()  # nothing new to sync
        assert len(data_syncs) == after_flush
        b.append("t", 0, [rec(b"b")])
        b.commit("g", "t", 0, 2)
        assert len(data_syncs) == after_commit
        assert bool(all_syncs) == (policy != "never")  # the offset file and its directory
        assert b.committed("g", "t", 0) == 2


def test_commit_makes_data_durable_before_recording_the_offset(
    monkeypatch: pytest.MonkeyPatch, root: Path
) -> None:
    events: list[str] = []
    with FileBroker(root) as b:
        b.create_topic("t", 1)
        b.append("t", 0, [rec(b"a")])
        monkeypatch.setattr(filelog_segment, "_fdatasync", lambda fd: events.append("data"))
        real = filelog._atomic_write
        for module in (filelog_queue, offsets):  # the durable point, the group offset
            monkeypatch.setattr(
                module, "_atomic_write", lambda *a, **k: (events.append(a[0].name), real(*a, **k))
            )
        b.commit("g", "t", 0, 1)
    # the data, then the durable point that covers it, then the offset
    assert events == ["data", filelog.DURABLE_FILE, "0.json"]


# -- property ----------------------------------------------------------------------------------

record_st = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    st.none() | st.binary(max_size=12),
    st.none() | st.binary(max_size=40),
    st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=4)), max_size=2).map(tuple),
)
ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 2), st.lists(record_st, max_size=12)),
        st.tuples(st.just("reopen"), st.just(0), st.just([])),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_st, segment_bytes=st.sampled_from([150, 600, 1 << 20]), data=st.data())
def test_property_records_read_back_as_produced(
    ops: list[tuple[str, int, list[Record]]], segment_bytes: int, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = FileBroker(tmp, fsync="never", segment_bytes=segment_bytes, index_interval_bytes=64)
        b.create_topic("t", 3)
        produced: list[list[Record]] = [[], [], []]
        try:
            for op, queue, batch in ops:
                if op == "reopen":
                    b.close()
                    b = FileBroker(tmp, fsync="never")
                    continue
                assert b.append("t", queue, batch) == len(produced[queue])
                produced[queue] += batch
            for queue, want in enumerate(produced):
                got = b.read("t", queue, 0)
                assert [(r.timestamp, r.key, r.value, r.headers) for r in got] == want
                assert [r.offset for r in got] == list(range(len(want)))
                assert b.end_offset("t", queue) == len(want)
                start = data.draw(st.integers(0, len(want)), label="start")
                n = data.draw(st.none() | st.integers(1, 20), label="max_records")
                part = b.read("t", queue, start, n)
                assert [r.offset for r in part] == list(range(len(want)))[start:][:n]
        finally:
            b.close()


key_op_st = st.tuples(st.integers(0, 12), st.booleans())  # (key, delete?)
changelog_st = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"), st.lists(st.tuples(st.integers(0, 12), st.booleans()), max_size=8)
        ),
        st.tuples(st.just("compact"), st.just([])),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=changelog_st)
def test_property_compaction_keeps_the_table(ops: list[tuple[str, list[tuple[int, bool]]]]) -> None:
    """Replaying the compacted changelog gives the table that replaying everything gives."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        FileBroker(tmp, fsync="never", segment_bytes=200) as b,
    ):
        b.create_topic("c", 1, compacted=True)
        table: dict[bytes, bytes] = {}
        n = 0
        for op, puts in ops:
            if op == "compact":
                b.compact("c", 0, tombstone_retention_ms=0, now_ms=n)  # every tombstone is old
                continue
            batch = []
            for k, delete in puts:
                key, value = b"k%d" % k, None if delete else b"v%d" % n
                batch.append(rec(value, ts=n, key=key))
                n += 1
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
            b.append("c", 0, batch)
        replay: dict[bytes, bytes] = {}
        got = b.read("c", 0, 0)
        for r in got:
            assert r.key is not None
            if r.value is None:
                replay.pop(r.key, None)
            else:
                replay[r.key] = r.value
        assert replay == table
        assert [r.offset for r in got] == sorted({r.offset for r in got})
        assert b.end_offset("c", 0) == n


# -- a full or failing disk (RSTREAMS_FAULTS write points) ------------------------------------


@pytest.fixture
def faults() -> Iterator[Callable[[str], None]]:
    from rstreams.runtime.faults import set_faults

    yield set_faults
    set_faults("")


def test_an_append_the_disk_refuses_names_its_file_and_leaves_nothing(tmp_path, faults) -> None:
    with FileBroker(tmp_path) as b:
        b.create_topic("t", 1)
        b.append("t", 0, [rec(b"a")])
        faults("log-append:1:ENOSPC")
        with pytest.raises(OSError, match="No space left") as e:
            b.append("t", 0, [rec(b"b" * 1000)])
        assert e.value.filename == str(tmp_path / "topics" / "t" / "0" / f"{0:020d}.log")
        faults("")
        assert b.append("t", 0, [rec(b"c")]) == 1
        assert [r.value for r in b.read("t", 0, 0)] == [b"a", b"c"]
    with FileBroker(tmp_path) as again:
        assert [r.value for r in again.read("t", 0, 0)] == [b"a", b"c"]


def test_a_flush_that_failed_is_done_again_by_the_next_one(tmp_path, faults) -> None:
    durable = tmp_path / "topics" / "t" / "0" / filelog.DURABLE_FILE
    with FileBroker(tmp_path) as b:
        b.create_topic("t", 1)
        b.append("t", 0, [rec(b"a"), rec(b"b")])
        faults("log-sync:1:EIO")
        with pytest.raises(OSError, match="Input/output error") as e:
            b.flush()
        assert e.value.filename is not None and str(tmp_path) in e.value.filename
        assert not durable.exists()  # not said durable
        faults("")
        b.flush()  # syncs what the failed flush did not, and says so
        assert filelog.parse_durable(durable.read_text())[2] == 2


def test_an_offset_the_disk_refuses_leaves_the_old_one_and_no_temporary_file(
    tmp_path, faults
) -> None:
    with FileBroker(tmp_path) as b:
        b.create_topic("t", 1)
        b.append("t", 0, [rec(b"a"), rec(b"b")])
        b.commit("g", "t", 0, 1)
        faults("offset-commit:1:ENOSPC")
        with pytest.raises(OSError, match="No space left"):
            b.commit("g", "t", 0, 2)
        faults("")
        assert b.committed("g", "t", 0) == 1
        assert not [p for p in (tmp_path / "groups").rglob(".*.tmp")]
