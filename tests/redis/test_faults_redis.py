"""The fault suite of tests/integration/test_faults.py on Redis: the cases whose meaning
carries over from the file log, run on a job whose topics are Redis streams.

The job is the word count (examples/wordcount.py): a first run on half of a generated
text, damage (a stream of the job deleted, trimmed or with entries XDEL'ed; the local
state deleted or flipped), the input grown to the whole text, and a second run. Every
second run gives the exact table or stops with an error naming the stream, the offset
and what to do (``--fresh``); never exit 0 with a smaller table. One real redis-server
for the module, a flushed database per test.

Left file-only (no Redis meaning): byte damage inside log segments and ``topics
check``/``repair`` (a Redis stream has no bytes to flip; the server checks its own AOF),
and the injected log-append/log-sync/offset-commit write errors (the file log's writes).
"""

from __future__ import annotations

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
import redis
from redisserver import RedisServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = str(ROOT / "examples" / "wordcount.py")
WORD = re.compile(r"\w+")
PREFIX = "rs:{wordcount}:"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the module (AOF, fsync always)."""
    s = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield s
    s.stop()


class RedisJob:
    """The word count's input, output, local data directory and Redis database."""

    # (9,000 lines: the first run's half gives each of the 8 source queues more than one
    # stream entry of 500 records, so entries below the committed position exist)
    def __init__(self, tmp: Path, url: str, lines: int = 9000, seed: int = 1) -> None:
        self.input, self.output, self.data = tmp / "in.txt", tmp / "out.jsonl", tmp / "data"
        self.url = url
        self.client = redis.Redis.from_url(url)
        rng = random.Random(seed)
        vocab = [f"w{i}" for i in range(2000)]
        self.text = [" ".join(rng.choices(vocab, k=8)) + "\n" for _ in range(lines)]

    def write(self, half: bool) -> None:
        lines = self.text[: len(self.text) // 2] if half else self.text
        self.input.write_text("".join(lines))

    def run(
        self, *extra: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        self.output.unlink(missing_ok=True)
        return subprocess.run(
            [sys.executable, "-m", "rstreams", "run", PIPELINE, "--input", str(self.input),
             "--output", str(self.output), "-q", "--broker", self.url,
             "--data-dir", str(self.data), "--workers", "1", *extra],
            capture_output=True, text=True, timeout=240, cwd=ROOT,
            env={**os.environ, **(env or {})},
        )  # fmt: skip

    def exact(self) -> bool:
        import json

        if not self.output.exists():
            return False
        rows = [json.loads(line) for line in self.output.read_text().splitlines()]
        table = {r["key"]: r["value"] for r in rows}
        return table == dict(Counter(WORD.findall(self.input.read_text().lower())))

    def streams(self, role: str) -> list[str]:
        """The job's stream keys of a topic (``source``, ``sink`` or ``changelog``)."""
        keys = sorted(k.decode() for k in self.client.keys(f"{PREFIX}q:*"))
        if role == "changelog":
            return [k for k in keys if k.rsplit(":", 1)[0].endswith("-changelog")]
        topic = {"source": "sentences", "sink": "word-counts"}[role]
        return [k for k in keys if k.startswith(f"{PREFIX}q:{topic}:")]

    def first_run(self) -> None:
        self.write(half=True)
        r = self.run()
        assert r.returncode == 0, r.stderr
        assert self.exact()

    def second_run(self) -> subprocess.CompletedProcess[str]:
        self.write(half=False)
        return self.run()


class FirstRun:
    """The job after its first run, run once per module and put back before each test:
    its directory copied aside (at the same path, as the read marks name the input's
    path) and its Redis database copied to a template database (COPY ... DB)."""

    DB, TEMPLATE = 1, 2

    def __init__(self, root: Path, server: RedisServer) -> None:
        self.where, self.kept = root / "job", root / "job.first-run"
        self.server = server
        self.url = f"redis://127.0.0.1:{server.port}/{self.DB}"

    def _copy_db(self, source: int, target: int) -> None:
        client = redis.Redis(port=self.server.port, db=source)
        redis.Redis(port=self.server.port, db=target).flushdb()
        for key in client.keys("*"):
            client.copy(key, key, destination_db=target)

    def job(self) -> RedisJob:
        if not self.kept.exists():
            self.where.mkdir()
            redis.Redis(port=self.server.port, db=self.DB).flushdb()
            RedisJob(self.where, self.url).first_run()
            shutil.copytree(self.where, self.kept)
            self._copy_db(self.DB, self.TEMPLATE)
        else:
            shutil.rmtree(self.where)
            shutil.copytree(self.kept, self.where)
            self._copy_db(self.TEMPLATE, self.DB)
        return RedisJob(self.where, self.url)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory, server: RedisServer) -> FirstRun:
    return FirstRun(tmp_path_factory.mktemp("first-run"), server)


@pytest.fixture
def job(first_run: FirstRun) -> RedisJob:
    return first_run.job()


def _assert_names_the_loss(r: subprocess.CompletedProcess[str], keys: list[str]) -> None:
    """Exit 1, one error naming a damaged stream, an offset and ``--fresh``."""
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert "lost data on Redis" in r.stderr, r.stderr
    assert any(k in r.stderr for k in keys), r.stderr
    assert "offset" in r.stderr and "--fresh" in r.stderr, r.stderr


def _fresh_is_exact(j: RedisJob) -> None:
    r = j.run("--fresh")
    assert r.returncode == 0, r.stderr
    assert j.exact()


@pytest.mark.parametrize("state", ["deleted", "kept"])
def test_changelog_stream_deleted(job: RedisJob, state: str) -> None:
    """The file log's changelog damage with the state deleted / kept: the changelog
    streams deleted under the job."""
    keys = job.streams("changelog")
    job.client.delete(*keys)
    if state == "deleted":
        subprocess.run(["rm", "-rf", str(job.data / "wordcount" / "state")], check=True)
    r = job.second_run()
    _assert_names_the_loss(r, keys)
    assert not job.output.exists()
    _fresh_is_exact(job)


def test_sink_stream_cut_to_half(job: RedisJob) -> None:
    """The file log's sink segment cut to half: the sink stream XTRIMmed to half."""
    key = job.streams("sink")[0]
    held = job.client.xlen(key)
    assert held >= 2  # (entries of up to 500 records: the first run wrote several)
    job.client.xtrim(key, maxlen=held // 2, approximate=False)
    r = job.second_run()
    _assert_names_the_loss(r, [key])
    assert not job.output.exists()
    _fresh_is_exact(job)


@pytest.mark.parametrize("how", ["xdel", "xtrim"])
def test_source_entries_deleted_below_the_committed_position(job: RedisJob, how: str) -> None:
    """Source entries the job had consumed and committed, deleted or trimmed (retention
    by another program): nothing the job still needs is gone, the next run is exact."""
    key = job.streams("source")[0]
    if how == "xdel":
        ids = [entry for entry, _ in job.client.xrange(key)]
        assert len(ids) >= 2 and job.client.xdel(key, *ids[:-1]) == len(ids) - 1
    else:
        job.client.xtrim(key, maxlen=1, approximate=False)
    r = job.second_run()
    assert r.returncode == 0, r.stderr
    assert job.exact()


def test_flipped_state_file_is_rebuilt_from_the_changelog_stream(job: RedisJob) -> None:
    ssts = sorted((job.data / "wordcount" / "state").rglob("*.sst"), key=lambda p: p.stat().st_size)
    assert ssts, "the first run left no SST file"
    data = bytearray(ssts[-1].read_bytes())
    for i in range(len(data) // 2, min(len(data) // 2 + 16, len(data))):
        data[i] ^= 0xA5
    ssts[-1].write_bytes(bytes(data))
    r = job.second_run()
    assert r.returncode == 0, r.stderr
    assert job.exact()


def test_local_state_on_a_new_host_is_restored_from_redis(job: RedisJob, tmp_path: Path) -> None:
    """The state directory gone (another host's data directory): restored from the
    changelog streams, exact."""
    job.data = tmp_path / "other-host"
    r = job.second_run()
    assert r.returncode == 0, r.stderr
    assert job.exact()


def test_a_write_error_in_the_local_state_stops_the_run_and_the_next_run_is_exact(
    job: RedisJob,
) -> None:
    """The file log's injected write errors that carry over: the local RocksDB state (the
    job's log is in Redis, so log-append/log-sync/offset-commit do not apply)."""
    job.write(half=False)
    failed = job.run("--state", "rocksdb", env={"RSTREAMS_FAULTS": "store-write:1:ENOSPC@3"})
    assert failed.returncode == 1, failed.stderr
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("rstreams: error: ") and "no space left on device" in last.lower()
    assert str(job.data / "wordcount") in last, failed.stderr
    r = job.run("--state", "rocksdb")
    assert r.returncode == 0, r.stderr
    assert job.exact()


def test_two_runs_at_once_one_is_refused(job: RedisJob, tmp_path: Path) -> None:
    """The job lock is in Redis: a second run with its own data directory is refused
    while the first holds the job (exit 2, naming the holder and --join)."""
    job.text *= 5  # (long enough to still run while the second starts)
    job.write(half=False)
    first = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "run", PIPELINE, "--input", str(job.input),
         "--output", str(job.output), "-q", "--broker", job.url, "--data-dir", str(job.data),
         "--workers", "1"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        second = None
        for _ in range(600):  # until the first run holds the job (its lock key, not the gen)
            if job.client.exists(f"{PREFIX}lock"):  # (not lock:gen, which stays)
                other = RedisJob(tmp_path / "second", job.url)
                (tmp_path / "second").mkdir()
                other.input = job.input
                second = other.run()
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert second is not None, job.client.keys(f"{PREFIX}*")
        if first.poll() is None:  # (the first may have finished already)
            assert second.returncode == 2, second.stderr
            assert "job 'wordcount' is already running" in second.stderr
    finally:
        _, err = first.communicate(timeout=240)
    assert first.returncode == 0, err
    assert job.exact()


def test_a_data_dir_made_read_only_is_refused_with_one_line(job: RedisJob) -> None:
    """A read-only local data directory on a Redis run: one line naming it, exit 2."""
    if os.geteuid() != 0:
        pytest.skip("a read-only mount needs root (chmod alone does not stop root)")
    if subprocess.run(["mount", "--bind", "-o", "ro", job.data, job.data]).returncode != 0:
        pytest.skip("can not make a read-only bind mount here")
    try:
        r = job.second_run()
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(f"rstreams: error: --data-dir {str(job.data)!r} is not writable")
    finally:
        subprocess.run(["umount", job.data], check=True)
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert job.exact()
