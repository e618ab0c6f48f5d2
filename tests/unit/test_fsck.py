"""Offline check and repair of the file log (``rstreams topics check`` / ``topics repair``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rstreams.cli import main
from rstreams.errors import ConfigError, JobNeedsRebuildError
from rstreams.runtime.queues import FileBroker
from rstreams.runtime.queues import _logformat as fmt
from rstreams.runtime.queues.fsck import (
    NEEDS_REBUILD_FILE,
    check_log,
    refuse_if_repaired,
    repair_queue,
)


def rec(v: bytes, key: bytes | None = None) -> tuple[int, bytes | None, bytes, tuple]:
    return (0, key, v, ())


def frames(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, end position) of every frame of a segment file."""

    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return [(p, b, stop) for p, b, _n, _l, _t, stop, _c, _f in fmt.iter_frames(fd, 0, size)]
    finally:
        os.close(fd)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A job directory (DATA/JOB/log) with topic t: 2 queues, small segments, 3 records a
    frame, and group g committed at the end of queue 0."""
    log = tmp_path / "data" / "job" / "log"
    with FileBroker(log, segment_bytes=300) as b:
        b.create_topic("t", 2)
        b.create_topic("c", 1, compacted=True)
        for i in range(10):
            b.append("t", 0, [rec(b"v%d-%d" % (i, j)) for j in range(3)])
            b.append("t", 1, [rec(b"x%d" % i)])
            b.append("c", 0, [rec(b"%d" % i, key=b"k%d" % (i % 3))])
        b.commit("g", "t", 0, 30)
        b.commit("g", "t", 1, 4)
    return log


def segs(log: Path, topic: str = "t", q: int = 0) -> list[Path]:
    return sorted((log / "topics" / topic / str(q)).glob("*.log"))


def test_a_sound_log_checks_clean(job: Path) -> None:
    checks = check_log(job)
    assert [(c.topic, c.queue, c.start, c.end, c.records, c.ok) for c in checks] == [
        ("c", 0, 0, 10, 10, True),
        ("t", 0, 0, 30, 30, True),
        ("t", 1, 0, 10, 10, True),
    ]
    assert checks[1].segments > 2 and checks[1].frames == 10
    with pytest.raises(ConfigError, match="no topic 'nope'"):
        check_log(job, ["nope"])


def test_check_names_every_damage_with_its_offset(job: Path) -> None:
    first, middle = segs(job)[0], segs(job)[1]
    data = bytearray(middle.read_bytes())
    pos, base, stop = frames(middle)[0]
    data[stop - 2] ^= 0xFF  # payload of the first frame of a closed segment
    middle.write_bytes(bytes(data))
    first.write_bytes(first.read_bytes()[: frames(first)[-1][0]])  # cut at a frame boundary
    (c,) = [c for c in check_log(job, ["t"]) if c.queue == 0]
    found = [(f.file, f.position, f.offset, f.fatal) for f in c.findings]
    cut_end = frames(first)[-1][2] if frames(first) else 0
    assert (str(first), cut_end, base - 3, True) in found
    assert (str(middle), pos, base, True) in found
    assert "crc mismatch" in str(c.findings[-1]) and not c.ok


def test_torn_tail_after_the_durable_point_is_only_a_note(job: Path) -> None:
    last = segs(job)[-1]
    with open(last, "ab") as f:
        f.write(b"RL half a frame")
    (c,) = [c for c in check_log(job, ["t"]) if c.queue == 0]
    assert c.ok and len(c.findings) == 1 and not c.findings[0].fatal
    assert "torn tail" in c.findings[0].problem


def test_repair_cuts_at_a_frame_lowers_groups_and_marks_the_job(job: Path) -> None:
    with pytest.raises(ConfigError, match=r"inside a frame .* start at 3 and 6"):
        repair_queue(job, "t", 0, 4)
    with pytest.raises(ConfigError, match="topic 'zz' does not exist"):
        repair_queue(job, "zz", 0, 4)
    r = repair_queue(job, "t", 0, 6)
    assert (r.removed_records, r.groups, r.job_marked) == (24, [("g", 30)], "job")
    assert r.removed_segments >= 1
    with FileBroker(job) as b:
        assert b.end_offset("t", 0) == 6 and b.committed("g", "t", 0) == 6
        assert [x.value for x in b.read("t", 0, 0)][-1] == b"v1-2"
        assert b.append("t", 0, [rec(b"new")]) == 6  # the queue goes on from the cut
    assert all(c.ok for c in check_log(job))
    doc = json.loads((job.parent / NEEDS_REBUILD_FILE).read_text())
    assert doc["topic"] == "t" and doc["cut_at"] == 6
    with pytest.raises(JobNeedsRebuildError, match=r"t\[0\] was cut at offset 6.*--fresh"):
        refuse_if_repaired(job.parent)


def test_repair_refuses_to_cut_beyond_the_damage(job: Path) -> None:
    middle = segs(job)[1]
    data = bytearray(middle.read_bytes())
    _pos, base, stop = frames(middle)[0]
    data[stop - 2] ^= 0xFF
    middle.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"end at offset {base} .damage starts there."):
        repair_queue(job, "t", 0, base + 3)
    r = repair_queue(job, "t", 0, base)
    assert r.removed_records == 30 - base
    assert all(c.ok for c in check_log(job))


def test_nothing_to_cut_leaves_the_job_alone(job: Path) -> None:
    r = repair_queue(job, "t", 1, 10)
    assert (r.removed_records, r.removed_bytes, r.job_marked) == (0, 0, None)
    refuse_if_repaired(job.parent)


def test_cli_check_and_repair(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = str(job.parent.parent)
    assert main(["topics", "check", "--data-dir", data_dir, "-q"]) == 0
    last = segs(job)[-1]
    data = bytearray(last.read_bytes())
    data[frames(last)[0][0] + 40] ^= 0x01
    last.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["topics", "check", "--data-dir", data_dir]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("damaged: t[0] offset ") and str(last) in out
    offset = int(out.split()[3].rstrip(":"))
    assert f"rstreams topics repair t --queue 0 --truncate-at {offset}" in err
    assert main(["topics", "repair", "t", "--data-dir", data_dir, "--queue", "0"]) == 2
    args = ["--queue", "0", "--truncate-at", str(offset), "--data-dir", data_dir]
    assert main(["topics", "repair", "t", *args]) == 0
    out, _ = capsys.readouterr()
    assert f"cut at offset {offset}" in out and "group 'g' had committed offset 30" in out
    assert "--fresh" in out
    assert main(["topics", "check", "--data-dir", data_dir]) == 0
