"""Fault injection through the CLI: every run either gives the exact table or stops with
an error naming what is damaged, and the repair commands bring the job back.

The job is the word count (examples/wordcount.py) on a generated text: a first run on
half of it, damage to the job's data directory, the input grown to the whole text, and
a second run. Recovery follows what the errors say: ``topics check`` lists the damage,
``topics repair`` cuts it, the next run refuses without ``--fresh``, and ``--fresh``
gives the exact table again. Real file log, real RocksDB, real worker processes.

On Redis the cases that carry over run in tests/redis/test_faults_redis.py (changelog
and sink streams deleted or cut, state flipped or lost, two runs, a read-only data dir,
a local-state write error). File-only here: bytes flipped or cut inside segments and
``topics check``/``repair`` (a stream has no bytes to damage), and the log-append,
log-sync and offset-commit write errors (writes of the file log).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = str(ROOT / "examples" / "wordcount.py")
WORD = re.compile(r"\w+")
DAMAGE = re.compile(r"^damaged: (\S+)\[(\d+)\] offset (\d+): ", re.M)


def _text(lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    return [" ".join(rng.choices(vocab, weights, k=10)) + "\n" for _ in range(lines)]


def _counts(path: Path) -> dict[str, int]:
    return dict(Counter(WORD.findall(path.read_text().lower())))


def rstreams(
    *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


class Job:
    """The word count's input, output and data directory in ``tmp``."""

    def __init__(self, tmp: Path, lines: int = 8000, seed: int = 1) -> None:
        self.tmp = tmp
        self.input = tmp / "in.txt"
        self.output = tmp / "out.jsonl"
        self.data = tmp / "data"
        self.text = _text(lines, seed)

    @property
    def dir(self) -> Path:
        return self.data / "wordcount"

    @property
    def log(self) -> Path:
        return self.dir / "log"

    def write(self, half: bool) -> None:
        lines = self.text[: len(self.text) // 2] if half else self.text
        self.input.write_text("".join(lines))

    def run(
        self, *extra: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        self.output.unlink(missing_ok=True)
        args = ["--input", str(self.input), "--output", str(self.output), "-q"]
        return rstreams(
            "run", PIPELINE, *args, "--data-dir", str(self.data), "--workers", "1", *extra,
            env=env,
        )  # fmt: skip

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        return rstreams(*args, "--data-dir", str(self.data), "--job", "wordcount")

    def table(self) -> dict[str, int]:
        rows = [json.loads(line) for line in self.output.read_text().splitlines()]
        return {r["key"]: r["value"] for r in rows}

    def exact(self) -> bool:
        return self.output.exists() and self.table() == _counts(self.input)

    def segments(self, topic: str) -> list[Path]:
        return sorted((self.log / "topics" / topic).glob("*/*.log"), key=lambda p: p.stat().st_size)

    def topic(self, role: str) -> str:
        names = [p.name for p in (self.log / "topics").iterdir() if p.is_dir()]
        if role == "changelog":
            return next(n for n in names if n.endswith("-changelog"))
        return {"source": "sentences", "sink": "word-counts"}[role]

    def first_run(self) -> None:
        self.write(half=True)
        r = self.run()
        assert r.returncode == 0, r.stderr
        assert self.exact()

    def recover(self, failed: subprocess.CompletedProcess[str]) -> None:
        """Follow the advice: check, repair what it lists, refuse without --fresh, rebuild."""
        assert "topics check" in failed.stderr and "--fresh" in failed.stderr, failed.stderr
        check = self.admin("topics", "check")
        assert check.returncode == 1, check.stdout + check.stderr
        cuts: dict[tuple[str, int], int] = {}
        for topic, q, offset in DAMAGE.findall(check.stdout):
            key = (topic, int(q))
            cuts[key] = min(cuts.get(key, int(offset)), int(offset))
        assert "damaged: " in check.stdout, check.stdout
        for (topic, q), offset in cuts.items():
            r = self.admin(
                "topics", "repair", topic, "--queue", str(q), "--truncate-at", str(offset)
            )
            assert r.returncode == 0, r.stderr
            assert f"cut at offset {offset}" in r.stdout
        if len(cuts) == len(check.stdout.splitlines()):  # every damage could be cut
            again = self.admin("topics", "check")
            assert again.returncode == 0, again.stdout + again.stderr
            refused = self.run()
            assert refused.returncode == 1 and "--fresh" in refused.stderr, refused.stderr
            assert "was repaired" in refused.stderr
        # else (a damaged offset or metadata file: nothing to cut) only a rebuild helps
        rebuilt = self.run("--fresh")
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert self.exact()


def _flip(path: Path, at: int, n: int = 16) -> None:
    data = bytearray(path.read_bytes())
    for i in range(at, min(at + n, len(data))):
        data[i] ^= 0xA5
    path.write_bytes(bytes(data))


def _cut(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


class FirstRuns:
    """The job after its first run, per text seed, run once and restored for each test.

    The first run is the same for every test (or example) of a seed (one worker, the
    same text), so it runs once: its directory (input, output, data directory) is copied
    aside and put back, at the same path, before each test with that seed. The same
    path, as the job's read marks name the input's path."""

    def __init__(self, root: Path, lines: int) -> None:
        self.root = root
        self.lines = lines

    def job(self, seed: int) -> Job:
        where, kept = self.root / f"seed-{seed}", self.root / f"seed-{seed}.first-run"
        if kept.exists():
            shutil.rmtree(where)
            shutil.copytree(kept, where)
            return Job(where, lines=self.lines, seed=seed)
        where.mkdir()
        j = Job(where, lines=self.lines, seed=seed)
        j.first_run()
        shutil.copytree(where, kept)
        return j


@pytest.fixture(scope="module")
def first_8000(tmp_path_factory: pytest.TempPathFactory) -> FirstRuns:
    return FirstRuns(tmp_path_factory.mktemp("first-run"), lines=8000)


@pytest.fixture
def job(first_8000: FirstRuns) -> Job:
    """The word count on 8,000 lines after its first run (on half of them)."""
    return first_8000.job(seed=1)


def test_two_runs_at_once_one_is_refused(tmp_path: Path) -> None:
    j = Job(tmp_path, lines=60_000)
    j.write(half=False)
    args = ["--input", str(j.input), "-q", "--data-dir", str(j.data), "--workers", "1"]
    first = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "run", PIPELINE, *args, "--output", str(j.output)],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        second = None
        for _ in range(200):  # until the first run holds the job
            if (j.data / ".wordcount.lock").exists() and (j.dir / "log").exists():
                second = rstreams("run", PIPELINE, *args, "--output", str(tmp_path / "2.jsonl"))
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert second is not None
        if first.poll() is None:  # (the first may have finished already on a fast machine)
            assert second.returncode == 2, second.stderr
            assert "job 'wordcount' is already running (pid" in second.stderr
    finally:
        _, err = first.communicate(timeout=240)
    assert first.returncode == 0, err
    assert j.exact()


@pytest.mark.parametrize("damage", ["flip 16 bytes in the middle", "cut to half"])
def test_source_segment_damage(job: Job, damage: str) -> None:
    seg = job.segments("sentences")[-1]  # the largest
    size = seg.stat().st_size
    if damage.startswith("flip"):
        _flip(seg, size // 2)
    else:
        _cut(seg, size // 2)
    job.write(half=False)
    r = job.run()
    assert r.returncode == 1, r.stderr
    assert "corrupt log 'sentences'[" in r.stderr and seg.name in r.stderr
    assert not job.output.exists()
    job.recover(r)


def test_changelog_damage_with_state_deleted(job: Job) -> None:
    topic = job.topic("changelog")
    seg = job.segments(topic)[-1]
    _flip(seg, seg.stat().st_size // 2)
    for d in (job.dir / "state").iterdir():
        subprocess.run(["rm", "-rf", str(d)], check=True)
    job.write(half=False)
    r = job.run()
    assert r.returncode == 1, r.stderr
    assert topic in r.stderr and "offset" in r.stderr
    job.recover(r)


def test_changelog_damage_with_state_kept(job: Job) -> None:
    topic = job.topic("changelog")
    seg = job.segments(topic)[-1]
    _flip(seg, seg.stat().st_size // 2)
    job.write(half=False)
    r = job.run()
    if r.returncode == 0:
        assert job.exact()
    else:
        assert r.returncode == 1 and topic in r.stderr, r.stderr
        job.recover(r)


def test_sink_segment_cut_to_half(job: Job) -> None:
    seg = job.segments("word-counts")[-1]
    _cut(seg, seg.stat().st_size // 2)
    job.write(half=False)
    r = job.run()
    assert r.returncode == 1, r.stderr
    assert "corrupt log 'word-counts'[" in r.stderr
    assert not job.output.exists()
    job.recover(r)


def test_flipped_state_file_is_rebuilt_from_the_changelog(job: Job) -> None:
    ssts = sorted((job.dir / "state").rglob("*.sst"), key=lambda p: p.stat().st_size)
    assert ssts, "the first run left no SST file"
    _flip(ssts[-1], ssts[-1].stat().st_size // 2)
    job.write(half=False)
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert job.exact()


# -- random damage ---------------------------------------------------------------------------

DATA_PARTS = ("log/topics", "log/groups", "state")


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory: pytest.TempPathFactory) -> FirstRuns:
    return FirstRuns(tmp_path_factory.mktemp("random"), lines=4000)


@settings(
    max_examples=28,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    pick=st.integers(0, 2**32),
    where=st.floats(0, 1),
    flip=st.booleans(),
    action=st.sampled_from(["damage", "damage", "rewrite input", "truncate input", "full disk"]),
)
def test_random_damage_is_exact_or_an_error_naming_it(
    first_runs: FirstRuns, pick: int, where: float, flip: bool, action: str
) -> None:
    j = first_runs.job(seed=pick % 7)
    if action != "damage":
        _input_or_disk_fault(j, action, pick, where)
        return
    files = sorted(
        p
        for part in DATA_PARTS
        for p in (j.dir / part).rglob("*")
        if p.is_file() and p.stat().st_size and not p.name.endswith("lock")
    )
    victim = files[pick % len(files)]
    size = victim.stat().st_size
    at = min(int(where * size), size - 1)
    if flip:
        _flip(victim, at, n=1 + pick % 16)
    else:
        _cut(victim, at)
    j.write(half=False)
    r = j.run()
    if r.returncode == 0:
        assert j.exact(), f"exit 0 with a wrong table after damaging {victim} at {at}"
        return
    rel = victim.relative_to(j.dir)
    named = (
        str(victim) in r.stderr
        or victim.name in r.stderr
        or any(part in r.stderr for part in rel.parts[2:4] if not part.isdigit())
    )
    assert r.returncode in (1, 2) and named, f"{victim} at {at}: {r.stderr[-2000:]}"
    if "topics check" in r.stderr:
        j.recover(r)
    else:
        rebuilt = j.run("--fresh")
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert j.exact()


def _input_or_disk_fault(j: Job, action: str, pick: int, where: float) -> None:
    """The input rewritten (another text of the same size) or cut below what the job
    read: refused before any work, naming the file, and --fresh is exact. The disk full
    at the ``1 + pick % 5``-th append of a process: one error line, and the same command
    once there is room again is exact."""
    read = j.input.read_text()
    if action == "full disk":
        j.write(half=False)
        env = {**os.environ, "RSTREAMS_FAULTS": f"log-append:1:ENOSPC@{1 + pick % 5}"}
        r = j.run(env=env)
        if r.returncode == 0:  # (fewer appends than that in this run)
            assert j.exact(), r.stderr
            return
        _one_line_error(r, "no space left on device")
        r = j.run()
        assert r.returncode == 0, r.stderr
        assert j.exact()
        return
    if action == "rewrite input":
        other = "".join(_text(4000, pick % 7 + 1))
        j.input.write_text((other * 2)[: len(read)])
    else:
        j.input.write_text(read[: min(int(where * len(read)), len(read) - 1)])
    r = j.run()
    assert r.returncode == 2, r.stderr
    assert str(j.input) in r.stderr and "changed since the job read it" in r.stderr, r.stderr
    rebuilt = j.run("--fresh")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert j.exact()


def test_a_data_dir_made_read_only_is_refused_with_one_line(job: Job) -> None:
    """The job's data directory on a read-only mount: the run and the admin commands
    refuse with one line naming it (exit 2), not an OSError traceback; writable again,
    the job goes on. A read-only mount, since chmod does not stop root."""
    if os.geteuid() != 0:
        pytest.skip("a read-only mount needs root (chmod alone does not stop root)")
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", job.data, job.data])
    if mounted.returncode != 0:
        pytest.skip("can not make a read-only bind mount here")
    try:
        job.write(half=False)
        for r in (job.run(), job.admin("topics", "list"), job.admin("produce", "sentences")):
            assert r.returncode == 2, r.stderr
            assert r.stderr == (
                f"rstreams: error: --data-dir {str(job.data)!r} is not writable (read-only "
                "file system or no permission); the job's log, its locks and state are "
                "written there: give a writable directory\n"
            )
    finally:
        subprocess.run(["umount", job.data], check=True)
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert job.exact()


def test_at_least_once_under_kills_is_exact_or_says_it_restarted(tmp_path: Path) -> None:
    """Workers that kill themselves at random commits under at-least-once: the run exits
    0, and a table that is not exact (records counted again after a restart) comes
    with the warning that says how many restarts there were; no restart, no warning."""
    j = Job(tmp_path, lines=20_000)
    j.write(half=False)
    env = {**os.environ, "RSTREAMS_FAULTS": "commit-start:0.02"}
    r = rstreams(
        "run", PIPELINE, "--input", str(j.input), "--output", str(j.output),
        "--data-dir", str(j.data), "--workers", "2", "--guarantee", "at-least-once",
        "--max-restarts", "20", env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    restarts = r.stderr.count("starting a replacement")
    warned = re.findall(r"(\d+) worker restart\(s\) during this --guarantee at-least-once run: "
                        r"the results may include duplicates", r.stderr)  # fmt: skip
    if restarts:
        assert warned == [str(restarts)], r.stderr
    else:
        assert warned == [] and j.exact(), r.stderr
    if not j.exact():
        assert restarts, r.stderr


# -- a full or failing disk ------------------------------------------------------------------


def _exact_after(tmp: Path, lines: int) -> Job:
    j = Job(tmp, lines=lines)
    j.write(half=False)
    return j


def _eos_run(j: Job, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    j.output.unlink(missing_ok=True)
    args = ["--input", str(j.input), "--output", str(j.output), "-q", "--data-dir", str(j.data)]
    return subprocess.run(
        [sys.executable, "-m", "rstreams", "run", PIPELINE, *args, "--workers", "2",
         "--guarantee", "exactly-once", "--state", "rocksdb"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def _one_line_error(r: subprocess.CompletedProcess[str], *says: str) -> None:
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("rstreams: error: "), r.stderr
    for s in says:
        assert s.lower() in last.lower(), r.stderr


@pytest.mark.parametrize(
    "fault",
    [
        "log-append/wordcount-transactions:1:ENOSPC@3",
        "log-append/word-counts:1:EIO@2",
        "log-append/wordcount-sentences-count-3-changelog:1:ENOSPC@2",
        "log-append/wordcount-sentences-count-3-shuffle:1:EIO@4",
        "log-sync:1:EIO@40",
        "offset-commit:1:ENOSPC@5",
        "store-write:1:ENOSPC@3",
        "log-append/sentences:1:ENOSPC",  # the supervisor's own ingest
        "log-durable:1:ENOSPC@20",
    ],
)
def test_a_write_error_in_a_commit_stops_the_run_and_the_next_run_is_exact(
    tmp_path: Path, fault: str
) -> None:
    """RSTREAMS_FAULTS makes a write of the commit path fail (in the workers and the
    supervisor alike) from its n-th time on, as a disk that filled up or went bad: the run
    stops with one line naming the error and the file; the disk fixed, the next run
    gives the exact table."""
    j = _exact_after(tmp_path, lines=20_000)
    failed = _eos_run(j, {"RSTREAMS_FAULTS": fault})
    errname = fault.split(":")[2].partition("@")[0]
    _one_line_error(failed, os.strerror(getattr(errno, errname)).lower(), str(j.dir))
    r = _eos_run(j)
    assert r.returncode == 0, r.stderr
    assert j.exact()


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[None]:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=False)


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None,
    reason="mounting a small tmpfs for the data directory needs root (and mount)",
)
def test_a_full_data_disk_stops_the_run_with_one_line_and_the_next_run_is_exact(
    tmp_path: Path,
) -> None:
    """The data directory on a 4 MB tmpfs, the word count of 2.5 MB on two workers,
    exactly-once on RocksDB: the disk fills up mid-run. The run stops with exit 1 and
    one line naming "no space left" and the file; then the tmpfs is grown, and the next
    run resumes and gives the exact table (not one word lost, none counted twice)."""
    j = Job(tmp_path, lines=60_000)  # (~2.5 MB of input)
    j.write(half=False)
    j.data = tmp_path / "disk"
    with _tmpfs(j.data, "4m"):
        failed = _eos_run(j)
        _one_line_error(failed, "no space left on device", str(j.data))
        assert not j.output.exists()
        subprocess.run(["mount", "-o", "remount,size=64m", str(j.data)], check=True)
        r = _eos_run(j)
        assert r.returncode == 0, r.stderr
        assert j.table() == dict(Counter(WORD.findall(j.input.read_text().lower())))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_worker_whose_log_file_is_full_still_tells_the_run_why_it_stopped(
    tmp_path: Path,
) -> None:
    """The workers' log files on a full disk (/dev/full: every write fails with ENOSPC):
    the run's error is still the worker's, read from its output, not a bare exit code."""
    j = _exact_after(tmp_path, lines=20_000)
    logs = j.dir / "logs"
    logs.mkdir(parents=True)
    for slot in (0, 1):
        (logs / f"worker-{slot}.log").symlink_to("/dev/full")
    failed = _eos_run(j, {"RSTREAMS_FAULTS": "log-append/wordcount-transactions:1:ENOSPC@3"})
    _one_line_error(failed, "no space left on device (injected) writing", "wordcount-transactions")
