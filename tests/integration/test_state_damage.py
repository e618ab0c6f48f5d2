"""Damaged state: a store is a cache of its changelog.

A job runs, its local state (RocksDB) is damaged between runs (an SST file's bytes
flipped, an SST deleted, the MANIFEST truncated or flipped, CURRENT deleted), the
input grows and the job runs again: the run exits 0 with exactly the table a fresh run
over the whole input gives, and a warning names the store it rebuilt. A damaged
changelog with the local state gone can rebuild nothing: the run stops naming the
changelog's topic, queue and offset and the next step. Real RocksDB, real file log,
real worker processes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from rstreams.errors import StateStoreError
from rstreams.state.rocksdb import RocksDBStore
from rstreams.state.stores import StoreDamagedError

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "data" / "corpus.txt"

COUNT = """
import re
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("wc")
    (b.source("sentences", queues=2)
       .flatMap(lambda line: re.findall(r"\\w+", line.lower()))
       .keyBy(lambda w: w)
       .count(queues=2)
       .sink("counts"))
    return b
"""

WINDOW = """
from rstreams import StreamBuilder, TumblingWindow

def build():
    b = StreamBuilder("win")
    (
        b.source("lines", queues=2)
        .selectTimestamp(lambda line: int(line.split()[0]))
        .keyBy(lambda line: line.split()[1])
        .window(TumblingWindow(60_000, grace=0))
        .count(name="count", queues=2)
        .toRStream()
        .sink("counts")
    )
    return b
"""

JOIN = """
import json
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("pay")
    orders = b.source("orders", queues=2).map(json.loads)
    payments = b.source("payments", queues=2).map(json.loads)
    (
        orders.leftJoin(payments)
        .where(lambda o: o["id"] % 50)
        .equalTo(lambda p: p["order"] % 50)
        .apply(lambda o, p: [o and o["id"], p and p["id"]], name="match", queues=2, ttl=10**12)
        .sink("matches")
    )
    return b
"""

KEYS = """
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("keys")
    b.source("keys", queues=1).keyBy(lambda k: k).count(queues=1).sink("counts")
    return b
"""

WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen"]


# -- inputs: (what to write, growing by ``part``) ------------------------------------------


def corpus_lines(part: int) -> dict[str, str]:
    text = CORPUS.read_text(encoding="utf-8")
    return {"sentences": text * (2 + part)}


def timed_lines(part: int) -> dict[str, str]:
    n = 8_000 * (1 + part)  # a line every 40 ms: about 5 minutes of windows per part
    return {"lines": "".join(f"{i * 40} {WORDS[(i * 7 + i // 3) % 8]}\n" for i in range(n))}


def orders_payments(part: int) -> dict[str, str]:
    n = 3_000 * (1 + part)
    orders = "".join(json.dumps({"id": i}) + "\n" for i in range(n))
    payments = "".join(json.dumps({"id": f"p{i}", "order": i}) + "\n" for i in range(0, n, 3))
    return {"orders": orders, "payments": payments}


def many_keys(part: int) -> dict[str, str]:
    """120,000 keys, every one again in each part: a store of several MB, all read."""
    return {"keys": "".join(f"key-{i:07d}\n" for i in range(120_000)) * (1 + part)}


JOBS: dict[str, tuple[str, str, str, Callable[[int], dict[str, str]]]] = {
    # kind: (job, pipeline, store directory prefix, inputs)
    "count": ("wc", COUNT, "wc-", corpus_lines),
    "window": ("win", WINDOW, "win-count", timed_lines),
    "join": ("pay", JOIN, "pay-match", orders_payments),
    "keys": ("keys", KEYS, "keys-", many_keys),
}


# -- running -------------------------------------------------------------------------------


class Job:
    """A pipeline of JOBS run with ``rstreams run`` on its own data directory."""

    def __init__(self, tmp: Path, kind: str, name: str = "data") -> None:
        self.job, source, self.prefix, self.inputs = JOBS[kind]
        self.tmp = tmp
        self.pipeline = tmp / f"{kind}.py"
        self.pipeline.write_text(textwrap.dedent(source))
        self.data = tmp / name
        self.inputs_dir = tmp / f"{name}-in"
        self.inputs_dir.mkdir(exist_ok=True)

    @property
    def state(self) -> Path:
        return self.data / self.job / "state"

    @property
    def worker_logs(self) -> str:
        logs = self.data / self.job / "logs"
        return "".join(p.read_text(errors="replace") for p in sorted(logs.glob("*")))

    def run(self, part: int, *args: str) -> subprocess.CompletedProcess[str]:
        binds: list[str] = []
        for topic, text in self.inputs(part).items():
            path = self.inputs_dir / f"{topic}.txt"
            path.write_text(text, encoding="utf-8")  # the same file, grown
            binds += ["--bind", f"{topic}={path}"]
        out = self.tmp / "out.jsonl"
        out.unlink(missing_ok=True)
        r = subprocess.run(
            [sys.executable, "-m", "rstreams", "run", str(self.pipeline), *binds,
             "--output", str(out), "--data-dir", str(self.data), *args],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        self.table = (
            {
                # A row's key, with its window for a windowed result.
                json.dumps({k: v for k, v in row.items() if k != "value"}): row["value"]
                for row in map(json.loads, out.read_text().splitlines())
            }
            if r.returncode == 0
            else None
        )
        return r

    def stores(self) -> list[Path]:
        """The RocksDB directories of the job's stores (one per store per queue)."""
        return sorted(p for p in self.state.glob(f"{self.prefix}*/*") if p.is_dir())


def expected(tmp: Path, kind: str, part: int) -> dict[str, object]:
    """The table of a fresh run over input ``part``."""
    fresh = Job(tmp, kind, "fresh")
    r = fresh.run(part, "--fresh")
    assert r.returncode == 0, r.stderr
    assert fresh.table
    return fresh.table


# -- damage --------------------------------------------------------------------------------


def flip(path: Path, at: float = 0.5, n: int = 16) -> None:
    data = bytearray(path.read_bytes())
    start = min(int(len(data) * at), max(0, len(data) - n))
    for i in range(start, min(len(data), start + n)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def largest_sst(job: Job) -> Path:
    ssts = [p for d in job.stores() for p in d.glob("*.sst")]
    assert ssts, f"no SST file under {job.state}"
    return max(ssts, key=lambda p: p.stat().st_size)


def flip_sst(job: Job) -> None:
    for d in job.stores():  # every store: each is read when the input grows
        for sst in d.glob("*.sst"):
            flip(sst)


def delete_sst(job: Job) -> None:
    largest_sst(job).unlink()


def truncate_manifest(job: Job) -> None:
    for d in job.stores():
        for m in d.glob("MANIFEST-*"):
            m.write_bytes(m.read_bytes()[: m.stat().st_size // 2])


def flip_manifest(job: Job) -> None:
    for d in job.stores():
        for m in d.glob("MANIFEST-*"):
            # Early: a damaged last record would pass for a torn write (RocksDB then
            # opens the state before it, consistent and rightly replayed from there).
            flip(m, 0.05, 8)


def delete_current(job: Job) -> None:
    for d in job.stores():
        (d / "CURRENT").unlink()


DAMAGE = {
    "flip-sst": flip_sst,
    "delete-sst": delete_sst,
    "truncate-manifest": truncate_manifest,
    "flip-manifest": flip_manifest,
    "delete-current": delete_current,
}

#: What the worker logs when it rebuilds a store from its changelog.
REBUILT = re.compile(r"WARNING.*state store '[^']+'.*rebuilding it from its changelog")


@pytest.fixture(scope="module")
def after_first_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Job, dict]]:
    """``after_first_run(kind)`` -> (a job that ran over input 0, the fresh table of input 1).

    The first run and the fresh run are made once per pipeline and module (they cost most
    of each case); every case gets the job's data directory back as the first run left
    it, at the same path (the log knows its input files by path).
    """
    made: dict[str, tuple[Job, Path, dict]] = {}

    def get(kind: str) -> tuple[Job, dict]:
        if kind not in made:
            tmp = tmp_path_factory.mktemp(f"damage-{kind}")
            job = Job(tmp, kind)
            r = job.run(0)
            assert r.returncode == 0, r.stderr
            snapshot = tmp / "after-first-run"
            shutil.copytree(job.data, snapshot)
            made[kind] = (job, snapshot, expected(tmp, kind, 1))
        job, snapshot, table = made[kind]
        shutil.rmtree(job.data)
        shutil.copytree(snapshot, job.data)
        return job, table

    return get


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("kind", ["count", "window", "join"])
def test_damaged_local_state_is_rebuilt_from_the_changelog(after_first_run, kind, damage) -> None:
    job, fresh_table = after_first_run(kind)
    assert job.stores(), "the job has no RocksDB store"
    DAMAGE[damage](job)
    r = job.run(1)  # the input grew
    assert r.returncode == 0, r.stderr
    assert job.table == fresh_table
    said = r.stderr + job.worker_logs
    assert REBUILT.search(said), said[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("on_error", ["fail", "skip"])
def test_damage_found_while_running_rebuilds_the_tasks_and_skips_no_record(
    tmp_path, on_error
) -> None:
    """A flipped data block of a large SST is only found when a key of it is read, in
    the middle of processing: never a record's error (``skip`` skips nothing); the
    worker drops its tasks uncommitted, rebuilds the store and goes on."""
    job = Job(tmp_path, "keys")
    r = job.run(0, "--on-error", on_error)
    assert r.returncode == 0, r.stderr
    sst = largest_sst(job)
    flip(sst, 0.2, 4)  # far from the index and metadata blocks read at open
    assert_found_by_reads_not_at_open(sst.parent)
    r = job.run(1, "--on-error", on_error)
    assert r.returncode == 0, r.stderr
    assert job.table == {json.dumps({"key": f"key-{i:07d}"}): 2 for i in range(120_000)}
    said = r.stderr + job.worker_logs
    assert "turned out damaged while running" in said, said[-3000:]
    assert REBUILT.search(said), said[-3000:]
    assert "skipped" not in said


def assert_found_by_reads_not_at_open(store: Path) -> None:
    """The flip hit a data block: the database opens (which reads only the index and
    metadata blocks) and a read of its keys finds the damage. Opened read-only, so the
    directory stays as the next run finds it."""
    from rocksdict import AccessType, Options, Rdict

    db = Rdict(str(store), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        it = db.iter()
        it.seek_to_first()
        while it.valid():
            it.next()
        # An iterator stops at damage as at the end: only status() tells them apart.
        with pytest.raises(Exception, match="Corruption"):
            it.status()
        del it
    finally:
        db.close()


# -- changelog damage ----------------------------------------------------------------------


def changelog_segments(job: Job) -> list[Path]:
    topics = job.data / job.job / "log" / "topics"
    return sorted(p for p in topics.glob("*-changelog/*/*.log") if p.stat().st_size > 256)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["count", "window"])
def test_a_damaged_changelog_without_local_state_stops_naming_topic_queue_offset(
    tmp_path, kind
) -> None:
    job = Job(tmp_path, kind)
    r = job.run(0)
    assert r.returncode == 0, r.stderr
    segment = changelog_segments(job)[0]
    flip(segment, 0.3, 4)  # a frame in the middle: valid frames follow it
    for d in job.stores():
        shutil.rmtree(d)  # the state must come from the changelog alone
    r = job.run(1)
    assert r.returncode != 0, "a run over a damaged changelog must not succeed"
    topic, queue = segment.parent.parent.name, segment.parent.name
    # Named by the restore (topic[queue]@offset) or by the log as it opens the queue.
    where = rf"{re.escape(topic)}'?\[{queue}\](@\d+|: .* \(offset \d+\))"
    assert re.search(where, r.stderr), r.stderr
    assert "--fresh" in r.stderr and "recovering-from-damage" in r.stderr, r.stderr
    # The advice works: a rebuild from the input.
    r = job.run(1, "--fresh")
    assert r.returncode == 0, r.stderr
    assert job.table == expected(tmp_path, kind, 1)


@pytest.mark.slow
def test_a_damaged_changelog_with_local_state_never_gives_a_wrong_table(tmp_path) -> None:
    """The store's checkpoint is past the damage: nothing needs the damaged records
    (or the log refuses them); either the table is right or the run says why not."""
    job = Job(tmp_path, "count")
    r = job.run(0)
    assert r.returncode == 0, r.stderr
    flip(changelog_segments(job)[0], 0.3, 4)
    for part in (1, 2):  # a second run too: nothing was left locked or half-done
        r = job.run(part)
        if r.returncode == 0:
            assert job.table == expected(tmp_path, "count", part)
        else:
            assert "changelog" in r.stderr and "--fresh" in r.stderr, r.stderr
            assert "lock hold" not in r.stderr, r.stderr


# -- RocksDBStore --------------------------------------------------------------------------


def test_clear_empties_an_open_store_and_keeps_it_usable(tmp_path) -> None:
    s = RocksDBStore(tmp_path / "s", "counts")
    s.write_batch([(b"a", b"1"), (b"b", b"2")], offset=7)
    s.flush()
    it = s.range()
    next(it)  # an iteration left half-way does not keep the database open
    s.clear()
    assert list(s.items()) == [] and len(s) == 0 and s.meta("changelog_offset") is None
    s.write_batch([(b"c", b"3")], offset=1)
    s.clear()
    s.write_batch([(b"d", b"4")], offset=2)
    s.close()
    again = RocksDBStore(tmp_path / "s", "counts")  # closed for real: its LOCK is free
    assert list(again.items()) == [(b"d", b"4")] and again.meta("changelog_offset") == 2
    again.close()
    again.close()  # twice is harmless


def _filled(path: Path) -> None:
    """10,000 keys in 5 SST files of about 90 kB (values do not compress)."""
    s = RocksDBStore(path, "counts")
    for i in range(50):
        rows = [(f"k{j:05d}".encode(), os.urandom(30)) for j in range(i * 200, i * 200 + 200)]
        s.write_batch(rows, offset=i)
        if i % 10 == 9:
            s.flush()
    s.close()


def test_a_flipped_sst_is_found_by_reads_and_iteration(tmp_path) -> None:
    path = tmp_path / "s"
    _filled(path)
    for sst in path.glob("*.sst"):
        if sst.stat().st_size > 10_000:  # the data's, not the metadata's
            flip(sst, 0.5, 4)  # a data block: found when it is read, not at open
    s = RocksDBStore(path, "counts")
    try:
        with pytest.raises(StoreDamagedError, match=r"state store 'counts' .*Corruption") as e:
            list(s.items())  # never a shorter iteration
        assert e.value.store == "counts" and e.value.path == str(path)
        keys = [f"k{j:05d}".encode() for j in range(10_000)]
        with pytest.raises(StoreDamagedError):
            s.get_many(keys)
        with pytest.raises(StoreDamagedError):
            for k in keys:
                s.get(k)
    finally:
        s.close()


@pytest.mark.parametrize("damage", ["delete-sst", "flip-manifest", "delete-current"])
def test_damage_that_stops_the_open_is_a_store_error(tmp_path, damage) -> None:
    path = tmp_path / "s"
    _filled(path)
    if damage == "delete-sst":
        next(path.glob("*.sst")).unlink()
    elif damage == "flip-manifest":
        flip(next(path.glob("MANIFEST-*")), 0.6, 8)
    else:
        (path / "CURRENT").unlink()
    with pytest.raises(StoreDamagedError, match=str(path)):
        RocksDBStore(path, "counts")


def test_a_locked_store_is_not_damage(tmp_path) -> None:
    s = RocksDBStore(tmp_path / "s", "counts")
    try:
        with pytest.raises(StateStoreError, match="lock") as e:
            RocksDBStore(tmp_path / "s", "counts")
        assert not isinstance(e.value, StoreDamagedError)  # deleting it would not help
    finally:
        s.close()
