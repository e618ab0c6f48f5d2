"""Check and repair a file log offline: ``rstreams topics check`` and ``topics repair``.

:func:`check_log` reads every frame of every segment (header, crc, payload, offsets) and
every committed-offset file, and reports each damage with the file, byte and first offset
it makes unreadable. It opens files read-only and takes no lock, so it may run next to a
job (it then reports a frame still being written as a torn tail).

:func:`repair_queue` cuts a queue at an offset on purpose: the segment holding that offset
is truncated at the frame that starts there, later segments are deleted, the queue's
durable point moves down to the cut and committed offsets above it are lowered to it. The
log is consistent again; what consumed the removed records (groups, state built from
them, outputs derived from them) is listed in the report. For a job's log the job is also
marked: its next run must rebuild it from the input (``rstreams run ... --fresh``),
because its state and outputs include records that no longer exist.

>>> import tempfile
>>> from rstreams.runtime.queues.filelog import FileBroker
>>> with tempfile.TemporaryDirectory() as root:
...     with FileBroker(root) as b:
...         b.create_topic("t", 1)
...         _ = b.append("t", 0, [(0, None, b"a", ())]), b.append("t", 0, [(0, None, b"b", ())])
...     [(c.topic, c.queue, c.end, c.ok) for c in check_log(root)]
...     repair_queue(root, "t", 0, 1).removed_records
...     [(c.end, c.ok) for c in check_log(root)]
[('t', 0, 2, True)]
1
[(1, True)]
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from rstreams.errors import ConfigError, JobNeedsRebuildError
from rstreams.runtime.layout import NEEDS_REBUILD_FILE, JobLayout
from rstreams.runtime.queues._files import _atomic_write, _encode_name
from rstreams.runtime.queues._logformat import (
    FrameError,
    decode_columns,
    find_frame_after,
    frame_crc_ok,
    iter_frames,
)
from rstreams.runtime.queues.filelog import (
    DURABLE_FILE,
    CorruptLogError,
    FileBroker,
    _fdatasync,
    _FileLock,
    below_durable,
    format_durable,
    parse_durable,
    parse_start,
)
from rstreams.runtime.queues.filelog.segment import list_bases, segment_path

__all__ = [
    "NEEDS_REBUILD_FILE",
    "Finding",
    "QueueCheck",
    "RepairReport",
    "check_log",
    "repair_queue",
]


@dataclass(frozen=True)
class Finding:
    """One problem: where it is and the first offset it makes unreadable (None if it is
    not about records, e.g. a damaged offset file). ``fatal`` is False for a torn tail
    beyond the durable point, which the next open truncates on its own."""

    topic: str
    queue: int | None
    file: str
    position: int | None
    offset: int | None
    problem: str
    fatal: bool = True

    def __str__(self) -> str:
        where = self.topic if self.queue is None else f"{self.topic}[{self.queue}]"
        at = f"{self.file}" + (f" byte {self.position}" if self.position is not None else "")
        off = f" offset {self.offset}" if self.offset is not None else ""
        kind = "damaged" if self.fatal else "note"
        return f"{kind}: {where}{off}: {at}: {self.problem}"


@dataclass
class QueueCheck:
    """What :func:`check_log` found in one queue."""

    topic: str
    queue: int
    start: int = 0
    end: int = 0  # the offset after the last readable record
    segments: int = 0
    frames: int = 0
    records: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.fatal for f in self.findings)


def _committed(root: Path, broker: FileBroker, topic: str, queue: int) -> list[tuple[str, int]]:
    out = []
    gdirs = sorted((root / "groups").iterdir()) if (root / "groups").is_dir() else []
    for gdir in gdirs:
        path = gdir / _encode_name(topic) / f"{queue}.json"
        if not gdir.name.startswith(".") and path.exists():
            with contextlib.suppress(CorruptLogError):  # reported by the group check
                doc = broker._read_offset_file(path)
                out.append((doc["group"], int(doc["offset"])))
    return out


def _scan_queue(
    qdir: Path, topic: str, queue: int, compacted: bool, durable: tuple[int, int, int] | None
) -> tuple[QueueCheck, list[tuple[int, int, int]]]:
    """Walk every frame; also returns (segment base, frame start, first offset) of every
    frame boundary that can be cut at, in order (the end of each segment included)."""
    qc = QueueCheck(topic, queue)
    cuts: list[tuple[int, int, int]] = []
    bases = list_bases(qdir)
    qc.segments = len(bases)
    try:
        qc.start = parse_start((qdir / "start-offset").read_text())
    except FileNotFoundError:
        qc.start = 0
    except ValueError as e:  # (UnicodeDecodeError included)
        qc.findings.append(
            Finding(topic, queue, str(qdir / "start-offset"), None, None, f"damaged ({e})")
        )
    at = bases[0] if bases else qc.start
    qc.start = max(qc.start, at)
    for i, base in enumerate(bases):
        nxt = bases[i + 1] if i + 1 < len(bases) else None
        at = max(at, base) if compacted else base
        at = _scan_segment(qc, cuts, segment_path(qdir, base), base, at, nxt, compacted, durable)
    qc.end = at
    if durable is not None and qc.end < durable[2] and qc.ok:
        seg, size, end = durable
        qc.findings.append(
            Finding(
                topic, queue, str(segment_path(qdir, seg)), size, qc.end,
                f"the log ends at offset {qc.end} but offsets up to {end - 1} were written "
                f"whole: records {qc.end}..{end - 1} are missing (a segment was cut short or "
                f"deleted)",
            )
        )  # fmt: skip
    return qc, cuts


def _scan_segment(
    qc: QueueCheck,
    cuts: list[tuple[int, int, int]],
    path: Path,
    base: int,
    at: int,
    nxt: int | None,
    compacted: bool,
    durable: tuple[int, int, int] | None,
) -> int:
    """Walk the frames of one segment whose first frame should hold offset ``at`` (the
    next segment starts at ``nxt``, None for the last): count them, note the cuts and
    the findings in ``qc``; the offset after the last readable record."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        try:
            for pos, fbase, count, last_delta, _ts, _stop, crc, frame in iter_frames(fd, 0, size):
                _check_frame(pos, fbase, count, last_delta, crc, frame, at, nxt, compacted)
                cuts.append((base, pos, at))
                qc.frames += 1
                qc.records += count
                at = fbase + last_delta + 1
            cuts.append((base, size, at))
            if nxt is not None and not compacted and at != nxt:
                qc.findings.append(
                    Finding(
                        qc.topic, qc.queue, str(path), size, at,
                        f"the segment ends at offset {at} but the next one starts at {nxt}: "
                        f"records {at}..{nxt - 1} are missing (the file was cut short)",
                    )
                )  # fmt: skip
        except FrameError as e:
            cuts.append((base, e.pos, at))
            after = find_frame_after(fd, e.pos, size, at)
            synced = below_durable(durable, base, e.pos)
            qc.findings.append(_damage(qc, path, e, at, size, after, synced, last=nxt is None))
    finally:
        os.close(fd)
    return at


def _check_frame(
    pos: int,
    fbase: int,
    count: int,
    last_delta: int,
    crc: int,
    frame: memoryview | None,
    at: int,
    nxt: int | None,
    compacted: bool,
) -> None:
    """Raise :class:`FrameError` unless the frame at byte ``pos`` holds offset ``at``
    (or a later one, ``compacted``), its crc matches, its columns decode, and its records
    end before the next segment's first offset ``nxt``."""
    if fbase != at and not (compacted and fbase > at):
        raise FrameError(pos, f"frame offset {fbase}; expected {at}")
    assert frame is not None
    if not frame_crc_ok(frame, crc):
        raise FrameError(pos, "crc mismatch")
    try:
        decode_columns(frame, fbase, count, last_delta)
    except FrameError as e:
        raise FrameError(pos, e.reason) from None
    if nxt is not None and fbase + last_delta >= nxt:
        raise FrameError(pos, f"its records run into the next segment ({nxt})")


def _damage(
    qc: QueueCheck,
    path: Path,
    e: FrameError,
    at: int,
    size: int,
    after: int | None,
    synced: bool,
    last: bool,
) -> Finding:
    """The finding for a segment unreadable from byte ``e.pos``: a torn tail (not fatal:
    the next open truncates it) when it is the ``last`` segment's end, nothing valid
    follows (``after``) and it lies above the durable point (not ``synced``); else
    damage."""
    if last and after is None and not synced:
        return Finding(
            qc.topic, qc.queue, str(path), e.pos, at,
            f"{e.reason}: a torn tail of {size - e.pos} bytes written after "
            f"the last sync; the next open truncates it",
            fatal=False,
        )  # fmt: skip
    why = f"; a valid frame follows at byte {after}" if after is not None else ""
    if synced and after is None:
        why = "; it lies below the queue's durable point"
    return Finding(qc.topic, qc.queue, str(path), e.pos, at, e.reason + why)


def _durable(
    qdir: Path, topic: str, queue: int, qc_findings: list[Finding]
) -> tuple[int, int, int] | None:
    path = qdir / DURABLE_FILE
    try:
        return parse_durable(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as e:
        qc_findings.append(
            Finding(topic, queue, str(path), None, None, f"the durable-point file is damaged ({e})")
        )
        return None


def check_log(root: str | os.PathLike[str], topics: list[str] | None = None) -> list[QueueCheck]:
    """Verify every frame of every queue of ``topics`` (default: all) under ``root``.

    Returns one :class:`QueueCheck` per queue, plus, for damaged topic metadata or
    committed-offset files, a QueueCheck with ``queue`` -1 holding those findings.
    """
    root = Path(root)
    out: list[QueueCheck] = []
    broker = FileBroker(root)
    try:
        names = sorted(
            unquote(d.name)
            for d in (root / "topics").iterdir()
            if d.is_dir() and not d.name.startswith(".")
        )
        if topics:
            unknown = sorted(set(topics) - set(names))
            if unknown:
                raise ConfigError(
                    f"no topic {', '.join(map(repr, unknown))} in {root} "
                    f"(topics: {', '.join(names) or 'none'})"
                )
            names = [n for n in names if n in topics]
        for name in names:
            tdir = root / "topics" / _encode_name(name)
            try:
                t = broker._topic(name)
            except CorruptLogError as e:
                qc = QueueCheck(name, -1)
                qc.findings.append(Finding(name, None, e.segment, None, None, e.reason))
                out.append(qc)
                continue
            if t is None:  # a directory without meta.json: a topic being created
                continue
            for q in range(t.queue_count):
                qdir = tdir / str(q)
                pre: list[Finding] = []
                durable = _durable(qdir, name, q, pre)
                qc, _ = _scan_queue(qdir, name, q, t.compacted, durable)
                qc.findings[:0] = pre
                for group, offset in _committed(root, broker, name, q):
                    if offset > qc.end:
                        qc.findings.append(
                            Finding(
                                name, q, str(qdir), None, qc.end,
                                f"group {group!r} committed offset {offset} but the readable "
                                f"records end at offset {qc.end}",
                            )
                        )  # fmt: skip
                out.append(qc)
        bad_groups = QueueCheck("(groups)", -1)
        gdir = root / "groups"
        for f in sorted(gdir.glob("*/*/*.json")) if gdir.is_dir() else []:
            if f.name.startswith(".") or (topics and unquote(f.parent.name) not in topics):
                continue
            try:
                broker._read_offset_file(f)
            except CorruptLogError as e:
                bad_groups.findings.append(Finding(e.topic, e.queue, str(f), None, None, e.reason))
        if bad_groups.findings:
            out.append(bad_groups)
    finally:
        broker.close()
    return out


@dataclass
class RepairReport:
    """What :func:`repair_queue` removed and what that affects."""

    topic: str
    queue: int
    cut_at: int
    removed_records: int
    removed_bytes: int
    removed_segments: int
    #: (group, the offset it had committed): lowered to ``cut_at``.
    groups: list[tuple[str, int]] = field(default_factory=list)
    #: Local state stores built from the removed records (a changelog's queue).
    stores: list[str] = field(default_factory=list)
    #: The job whose next run must be ``--fresh`` (None: not a job's log, or nothing cut).
    job_marked: str | None = None


def repair_queue(
    root: str | os.PathLike[str], topic: str, queue: int, truncate_at: int
) -> RepairReport:
    """Cut queue ``queue`` of ``topic`` at offset ``truncate_at``: records at and above it
    are removed. ``truncate_at`` must be where a frame starts (or the readable end); the
    error names the boundaries nearest to it otherwise. Do not run it while a job uses the
    log (the CLI holds the job's lock)."""
    root = Path(root)
    if truncate_at < 0:
        raise ConfigError(f"--truncate-at must be >= 0; got {truncate_at}")
    broker = FileBroker(root)
    try:
        t = broker._topic(topic)
        if t is None:
            known = ", ".join(sorted(broker.topics())) or "none"
            raise ConfigError(f"topic {topic!r} does not exist (topics: {known})")
        if not 0 <= queue < t.queue_count:
            raise ConfigError(f"topic {topic!r} has no queue {queue} (it has {t.queue_count})")
        qdir = t.dir / str(queue)
        with _FileLock(qdir / "maint.lock"), _FileLock(qdir / "lock"):
            report = _cut(root, broker, qdir, topic, queue, t.compacted, truncate_at)
    finally:
        broker.close()
    removed = report.removed_records or report.removed_bytes
    job = JobLayout.of_log(root)  # (None: not a job's log)
    if removed and job is not None:
        doc = {
            "repaired_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "topic": topic,
            "queue": queue,
            "cut_at": truncate_at,
            "removed_records": report.removed_records,
        }
        job.needs_rebuild.write_text(json.dumps(doc) + "\n")
        report.job_marked = job.job
        for store_dir in job.store_dirs(queue):
            if topic == f"{job.job}-{store_dir.parent.name}-changelog":
                report.stores.append(str(store_dir))
    return report


def _cut(
    root: Path, broker: FileBroker, qdir: Path, topic: str, queue: int, compacted: bool, at: int
) -> RepairReport:
    pre: list[Finding] = []
    durable = _durable(qdir, topic, queue, pre)
    qc, cuts = _scan_queue(qdir, topic, queue, compacted, durable)
    if at < qc.start:
        raise ConfigError(f"offset {at} of {topic}[{queue}] is below the queue's start {qc.start}")
    readable_end = cuts[-1][2] if cuts else qc.start
    first_bad = min((f.offset for f in qc.findings if f.offset is not None), default=None)
    limit = first_bad if first_bad is not None else readable_end
    exact = [c for c in cuts if c[2] == at]
    if at > limit or not exact:
        below = max((c[2] for c in cuts if c[2] < at), default=None)
        above = min((c[2] for c in cuts if c[2] > at), default=None)
        if at > limit:
            why = f"the readable records of {topic}[{queue}] end at offset {limit}"
            if first_bad is not None:
                why += " (damage starts there)"
            raise ConfigError(f"cannot cut at offset {at}: {why}; cut at {limit} or below")
        raise ConfigError(
            f"offset {at} of {topic}[{queue}] is inside a frame (one append); frames start "
            f"at {below} and {above}: cut at one of those"
        )
    base, pos, _ = exact[0]  # the first: a segment's end and the next one's start coincide
    bases = list_bases(qdir)
    seg_path = segment_path(qdir, base)
    removed_bytes = seg_path.stat().st_size - pos
    later = [b for b in bases if b > base]
    for b in later:
        p = segment_path(qdir, b)
        removed_bytes += p.stat().st_size
    end_before = max(qc.end, durable[2] if durable else 0)
    fd = os.open(seg_path, os.O_RDWR)
    try:
        os.ftruncate(fd, pos)
        _fdatasync(fd)
    finally:
        os.close(fd)
    for b in later:
        for suffix in (".log", ".index"):
            with contextlib.suppress(FileNotFoundError):
                (qdir / f"{b:020d}{suffix}").unlink()
    with contextlib.suppress(FileNotFoundError):
        seg_path.with_suffix(".index").unlink()  # rebuilt from the log on the next open
    # (synced with the directory, so the deletions above are durable too)
    _atomic_write(qdir / DURABLE_FILE, format_durable(base, pos, at), sync=True)
    report = RepairReport(topic, queue, at, max(end_before - at, 0), removed_bytes, len(later))
    for group, offset in _committed(root, broker, topic, queue):
        if offset > at:
            report.groups.append((group, offset))
            broker.commit(group, topic, queue, at)
    return report


def refuse_if_repaired(job_dir: str | os.PathLike[str]) -> None:
    """Raise :class:`JobNeedsRebuildError` if a repair removed records of this job."""
    path = JobLayout.at(job_dir).needs_rebuild
    try:
        doc = json.loads(path.read_text())
        what = (
            f"on {doc['repaired_at']}, {doc['topic']}[{doc['queue']}] was cut at offset "
            f"{doc['cut_at']} ({doc['removed_records']} offsets removed)"
        )
    except FileNotFoundError:
        return
    except (ValueError, KeyError, TypeError):
        what = f"a repair left {path} (unreadable)"
    raise JobNeedsRebuildError(
        f"job {Path(job_dir).name!r} was repaired: {what}. Its state and outputs include "
        f"records that are gone, so it must be rebuilt from its input: run it again with "
        f"--fresh (docs/state.md#recovering-from-damage)"
    )
