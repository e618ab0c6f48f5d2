"""`rstreams run --broker redis://...` end to end, on real redis-server processes: word
count with one and two workers, a second run joining the job (`--join`, its own data
directory), workers killed mid-run, fenced commits, and no password where `ps`, the
stats files or the logs show it."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from redisserver import RedisServer, free_port
from redisserver import running as running_redis

from rstreams.errors import FencedError
from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.engine.tasks.commit import Committer
from rstreams.runtime.queues.redis_joblock import RedisJobLock
from rstreams.runtime.queues.redisstreams import RedisBroker, RedisTarget
from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership
from tests.helpers.chaos import RandomKills

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "data" / "corpus.txt"
WORDCOUNT = ROOT / "examples" / "wordcount.py"


def expected_counts(path: Path) -> dict[str, int]:
    """What examples/wordcount.py counts (as tests/integration/test_cli.py does)."""
    with path.open(encoding="utf-8") as f:
        return dict(collections.Counter(w for line in f for w in re.findall(r"\w+", line.lower())))


def read_table(path: Path) -> dict[str, int]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {r["key"]: r["value"] for r in rows}


def run_cmd(*args: object) -> list[str]:
    return [sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), *map(str, args)]


def big_corpus(tmp_path: Path, times: int) -> Path:
    path = tmp_path / "big.txt"
    path.write_text(CORPUS.read_text(encoding="utf-8") * times, encoding="utf-8")
    return path


# (2 workers: the Redis test of ./dev test --fast, see pyproject.toml's markers)
@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.fast)])
def test_wordcount_over_redis_equals_counter(tmp_path, redis_url, workers):
    out = tmp_path / "counts.jsonl"
    r = subprocess.run(
        run_cmd("--input", CORPUS, "--broker", redis_url, "--workers", workers,
                "--data-dir", tmp_path / "data", "--output", out),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert read_table(out) == expected_counts(CORPUS)
    job = tmp_path / "data" / "wordcount"
    assert (job / "state").is_dir() and not (job / "log").exists()  # the log is in Redis


def test_a_job_moved_between_the_file_log_and_redis_rebuilds_its_local_state(tmp_path, redis_url):
    """Local stores are copies of one broker's changelogs: a data directory used on the
    file log, then with --broker (and back), drops the copies of the other broker."""
    data = tmp_path / "data"
    for broker in [(), ("--broker", redis_url), ()]:
        out = tmp_path / "counts.jsonl"
        r = subprocess.run(
            run_cmd("--input", CORPUS, *broker, "--workers", 1, "--data-dir", data,
                    "--output", out),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        # each broker's job read the whole input once (the file log's, twice: resumed)
        assert read_table(out) == expected_counts(CORPUS)
    assert (data / "wordcount" / "broker").read_text() == "file log\n"
    assert "not redis://127.0.0.1:" in r.stderr or "was built from redis://" in r.stderr


def test_another_data_dir_resumes_from_redis_and_fresh_starts_over(tmp_path, redis_url):
    lines = CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)
    corpus, out = tmp_path / "corpus.txt", tmp_path / "counts.jsonl"
    corpus.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    args = ("--input", corpus, "--broker", redis_url, "--workers", 1, "--output", out)
    for i, extra in enumerate([(), (), ("--fresh",)]):
        if i == 1:  # the input grew: the run goes on from what the first one committed
            corpus.write_text("".join(lines), encoding="utf-8")
        # Each run with a --data-dir of its own, as on another host: what the job read
        # and counted is in Redis, its state restored from the changelogs there.
        r = subprocess.run(
            run_cmd(*args, "--data-dir", tmp_path / f"data{i}", *extra),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert read_table(out) == expected_counts(corpus)  # never counted twice
        if i == 1:
            assert f"done: {len(lines) - len(lines) // 2:,} records in" in r.stderr


def test_join_without_a_running_job_fails_clearly(tmp_path, redis_url):
    r = subprocess.run(
        run_cmd("--broker", redis_url, "--join", "--data-dir", tmp_path / "data"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "no run of job 'wordcount' to join" in r.stderr


def _wait_for(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_second_host_joins_tasks_spread_results_exact(tmp_path, redis_url):
    corpus = big_corpus(tmp_path, 100)  # (long enough for B to join while A works)
    client = redis.Redis.from_url(redis_url)
    lock = RedisJobLock(client, "wordcount")
    observer = RedisGroupMembership(client, "wordcount", "wordcount", "observer")
    outs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    common = ("--broker", redis_url, "--workers", 1)
    a = subprocess.Popen(
        run_cmd("--input", corpus, "--data-dir", tmp_path / "host-a", "--output", outs[0],
                *common),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    b = None
    try:
        _wait_for(lambda: a.poll() is not None or observer.task_owners(), "A's tasks")
        assert a.poll() is None, a.communicate()[1]
        assert lock.holder() is not None
        b = subprocess.Popen(
            run_cmd("--join", "--data-dir", tmp_path / "host-b", "--output", outs[1], *common),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        hosts_seen: set[frozenset[str]] = set()
        while a.poll() is None:
            owners = observer.task_owners()
            # A member is "<host>-<supervisor pid>-w<slot>-<n>": its run's pid says its host.
            hosts_seen.add(frozenset(m.split("-w")[0].rsplit("-", 1)[1] for m in owners.values()))
            time.sleep(0.05)
        assert a.wait() == 0, a.stderr.read() if a.stderr else ""
        assert b.wait(timeout=120) == 0, b.stderr.read() if b.stderr else ""
        assert b.stderr is not None and "is gone before" not in b.stderr.read()
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert frozenset({str(a.pid), str(b.pid)}) in hosts_seen  # tasks on both hosts at once
    expected = expected_counts(corpus)
    assert read_table(outs[0]) == expected and read_table(outs[1]) == expected
    # Each host restored what it ran into its own data directory.
    assert (tmp_path / "host-b" / "wordcount" / "state").is_dir()


@pytest.mark.slow
def test_workers_killed_mid_run_results_exact(tmp_path, redis_url):
    corpus = big_corpus(tmp_path, 3)
    records = len(corpus.read_text().splitlines())
    chaos = RandomKills(seed=7, limit=8, records=records, gap=(0.2, 0.8))
    sup = Supervisor(
        str(WORDCOUNT), load_topology(str(WORDCOUNT)), {"sentences": str(corpus)},
        data_dir=tmp_path / "data", workers=2, chunk_lines=200, progress=chaos,
        broker=redis_url, max_restarts=10_000, max_ingest_rate=3_000,
        worker_args=["--commit-interval", "0.1", "--session-timeout", "2"],
    )  # fmt: skip
    chaos.supervisor = sup
    try:
        sup.run()
        table = sup.tables()["word-counts"]
    finally:
        sup.close()
    assert chaos.kills == 8
    assert table == expected_counts(corpus)


def test_a_fenced_owner_can_not_commit(redis_url):
    target = RedisTarget.parse(redis_url)
    broker = RedisBroker.open(target, "fenced")
    client = redis.Redis.from_url(redis_url)
    for topic in ("in", "out", "fenced-transactions"):
        broker.create_topic(topic, 1)
    old = RedisGroupMembership(client, "fenced", "fenced", "old")
    new = RedisGroupMembership(client, "fenced", "fenced", "new")
    old.join()
    new.join()
    assert old.acquire_task("0_0") and not new.acquire_task("0_0")

    def committer(member: RedisGroupMembership) -> tuple[Committer, Producer]:
        producer = Producer(broker)
        fence = lambda: member.task_fence("0_0")  # noqa: E731
        c = Committer("0_0", 0, "fenced", broker, producer, "fenced-transactions", 0, fence)
        return c, producer

    c_old, p_old = committer(old)
    client.delete(old.task_fence("0_0")[0])  # its lease ran out (a long pause)...
    assert new.acquire_task("0_0")  # ...and another member took the task
    c_new, p_new = committer(new)
    p_old.send("out", 0, b"k", b"from the old owner", 1, ())
    with pytest.raises(FencedError):
        c_old.begin(1, [], {"in": 5}, (0, 0))
    # Nothing of the refused commit was applied: no output, no position, no transaction.
    assert broker.end_offset("out", 0) == 0 and broker.committed("fenced", "in", 0) == 0
    assert broker.end_offset("fenced-transactions", 0) == 0
    p_new.send("out", 0, b"k", b"from the new owner", 1, ())
    c_new.begin(1, [], {"in": 3}, (0, 0), None, {"b-repartition": 7})
    assert [r.value for r in broker.read("out", 0, 0)] == [b"from the new owner"]
    assert broker.committed("fenced", "in", 0) == 3
    # The time told each step is in the fenced transaction too, for the next owner.
    c_next, _ = committer(new)
    assert c_next.recover() == (0, 0) and c_next.restored_told == {"b-repartition": 7}
    broker.close()


@pytest.mark.slow
def test_no_password_in_worker_argv_stats_or_logs(tmp_path):
    secret = "s3cret-Pa55"
    server = RedisServer(tmp_path / "redis", password=secret).start()
    try:
        password_file = tmp_path / "password"
        password_file.write_text(secret + "\n")
        url = f"redis://127.0.0.1:{server.port}/0"
        data = tmp_path / "data"
        corpus = big_corpus(tmp_path, 3)
        p = subprocess.Popen(
            run_cmd("--input", corpus, "--broker", url, "--broker-password-file", password_file,
                    "--workers", 2, "--data-dir", data, "-v"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        argvs: list[str] = []
        while p.poll() is None:
            ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
            argvs += [line for line in ps.splitlines() if "rstreams" in line]
            time.sleep(0.1)
        out, err = p.communicate()
        assert p.returncode == 0, err
        assert any(
            "rstreams.runtime.engine.coordination.worker" in a for a in argvs
        )  # workers were seen
        seen = [*argvs, out, err]
        seen += [f.read_text(errors="replace") for f in data.rglob("*") if f.is_file()
                 and f.suffix in (".json", ".log")]  # fmt: skip
        assert not [text for text in seen if secret in text]
        # With the password in the URL instead, argv of the workers still never has it.
        r = subprocess.run(
            run_cmd("--input", CORPUS, "--broker", f"redis://:{secret}@127.0.0.1:{server.port}/1",
                    "--workers", 1, "--data-dir", tmp_path / "data2", "--fresh"),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert secret not in r.stderr and secret not in r.stdout
    finally:
        server.stop()


@pytest.mark.parametrize("case", ["wrong-password", "password-file", "unreachable", "no-db"])
def test_run_refuses_a_bad_broker_in_one_line_exit_2(tmp_path, case):
    """A refused password (in the URL or a file), a port nobody listens on and a database
    the server does not have: one line, exit 2 (never the client's retries for a minute)."""
    with running_redis(tmp_path / "redis", password="s3cret-pw") as server:
        url, extra = f"redis://:wrong-pw@127.0.0.1:{server.port}/0", []
        if case == "password-file":
            (tmp_path / "pw").write_text("not-the-password\n")
            url, extra = (
                f"redis://127.0.0.1:{server.port}/0",
                ["--broker-password-file", tmp_path / "pw"],
            )
        elif case == "unreachable":
            url = f"redis://127.0.0.1:{free_port()}/0"
        elif case == "no-db":
            url = f"redis://:s3cret-pw@127.0.0.1:{server.port}/99"
        r = subprocess.run(
            run_cmd("--input", CORPUS, "--broker", url, *extra, "--workers", 1,
                    "--data-dir", tmp_path / "data", "--output", tmp_path / "out.jsonl"),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rstreams: error: "), r.stderr
    assert "s3cret-pw" not in r.stderr and "wrong-pw" not in r.stderr
    expected = {
        "wrong-password": "refused the credentials",
        "password-file": "refused the credentials",
        "unreachable": "cannot reach Redis",
        "no-db": "has no database 99",
    }[case]
    assert expected in lines[0], r.stderr


def test_a_job_resumed_from_another_data_directory_says_so(tmp_path, redis_url):
    """The job's state is in Redis: a run from a fresh data directory resumes it, and
    says so (before: it printed both inputs' counts together, nothing said)."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("x y\n")
    second.write_text("y z\n")
    for src, data in ((first, "one"), (second, "two")):
        r = subprocess.run(
            run_cmd("--input", src, "--broker", redis_url, "--workers", 1,
                    "--data-dir", tmp_path / data, "--output", tmp_path / f"{data}.jsonl"),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
    assert "job 'wordcount' resumes its earlier state in redis://127.0.0.1:" in r.stderr
    assert f"1 input records already taken in (read from {first})" in r.stderr
    assert read_table(tmp_path / "two.jsonl") == {"x": 1, "y": 2, "z": 1}
