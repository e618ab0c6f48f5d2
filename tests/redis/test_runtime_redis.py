"""The runtime's correctness tests of the file log, on a real redis-server: workers
SIGKILLed >= 20 times in one run, a rebalance storm, the watermark conformance of the
windows and joins (the driver's tables), and two hosts of one job, one killed whole.

The tests themselves are in tests/integration (loaded here by path, as
test_broker_contract_redis.py loads the contract): only the broker differs.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import signal
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import redis
from test_run_redis import _wait_for, big_corpus, expected_counts, read_table, run_cmd

from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_on_redis", INTEGRATION / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_eos = _load("test_exactly_once")
_conformance = _load("test_conformance_embedded")
_chaos = _load("test_chaos_cli")


@pytest.mark.slow
def test_random_kills_keep_counts_and_output_exact(tmp_path, monkeypatch, redis_url) -> None:
    _eos.random_kills_keep_counts_and_output_exact(tmp_path, monkeypatch, broker=redis_url)


@pytest.mark.slow
def test_rebalance_storm_with_joins_and_clean_leaves(tmp_path, redis_url) -> None:
    _eos.rebalance_storm_with_joins_and_clean_leaves(tmp_path, broker=redis_url)


#: The conformance pipelines of event time: windows and joins, and uneven queues.
WINDOWS_AND_JOINS = ["windowed_wordcount", "sessions", "order_payment_join", "access_log"]
UNEVEN = ["uneven_count", "uneven_join"]


@pytest.mark.slow
@pytest.mark.parametrize("name", WINDOWS_AND_JOINS + UNEVEN)
def test_windows_and_joins_give_the_drivers_tables(name, tmp_path, redis_url) -> None:
    """driver = in-memory = file log (tests/integration) = Redis, 2 workers."""
    if name in UNEVEN:
        path = _conformance.UNEVEN / f"{name}.py"
        topology, inputs, expected = _conformance.uneven_case(path, tmp_path)
    else:
        path = _conformance.ROOT / "examples" / f"{name}.py"
        topology = _conformance.example_topology(name)
        expected = _conformance.driver_tables(topology, _conformance.CASES[name])
        inputs = {t: str(p) for t, p in _conformance.CASES[name].items()}
    assert all(expected.values())
    result = _conformance.run(
        topology, inputs, data_dir=str(tmp_path / "d"), workers=2, pipeline=str(path),
        broker=redis_url,
    )  # fmt: skip
    assert result.tables == expected
    assert not list((tmp_path / "d").glob("*/log"))  # the log was in Redis


@pytest.mark.slow
def test_what_closes_before_the_end_is_the_same_on_redis(tmp_path, redis_url) -> None:
    """tests/pipelines/closing_count.py on Redis with 2 workers: the windows the input's
    time passed close by event time before the end of input, whether or not their queue
    got a later record; only the others at the end (as on the driver, in memory, the file
    log and Spark streaming: test_conformance_embedded, tests/spark/test_conformance)."""
    path = _conformance.UNEVEN / "closing_count.py"
    module = runpy.run_path(str(path))
    topology, inputs, _ = _conformance.uneven_case(path, tmp_path)
    expected = module["expected"]()
    assert {c for _, _, c, _ in expected} == {"event-time", "end-of-input"}
    result = _conformance.run(
        topology, inputs, data_dir=str(tmp_path / "d"), workers=2, pipeline=str(path),
        broker=redis_url,
    )  # fmt: skip
    assert module["labelled"](result.tables["counts"]) == expected


@pytest.mark.slow
def test_branches_told_apart_give_the_drivers_tables_on_redis(tmp_path, redis_url) -> None:
    """tests/pipelines/branches.py on Redis with 2 workers (whose fenced commits keep
    the time told each step): the lagging branch's step goes by its own time, however
    its task moves between workers; the same labelled tables as the driver."""
    path = _conformance.UNEVEN / "branches.py"
    topology, inputs, expected = _conformance.uneven_case(path, tmp_path)
    assert expected["b"] and not expected["late-b"]
    result = _conformance.run(
        topology, inputs, data_dir=str(tmp_path / "d"), workers=2, pipeline=str(path),
        broker=redis_url,
    )  # fmt: skip

    def labelled(tables: dict) -> dict:
        return {t: {(k.key, k.start, k.closed): v for k, v in rows.items()}
                for t, rows in tables.items() if t in ("a", "b")}  # fmt: skip

    assert result.tables == expected
    assert labelled(result.tables) == labelled(expected)


def _kill_host(pid: int) -> list[int]:
    """kill -9 of a run and its workers at one moment. Its workers are not in its process
    group (each has a session of its own: workerpool.py), so they are killed by pid:
    all stopped first, so none sees its supervisor gone and leaves cleanly."""
    os.kill(pid, signal.SIGSTOP)  # (a stopped supervisor starts no other worker)
    workers = _chaos.worker_pids(pid)
    for w in workers:
        os.kill(w, signal.SIGSTOP)
    for p in (pid, *workers):
        os.kill(p, signal.SIGKILL)
    return workers


def _host_of(member: str) -> str:
    """A member is "<host>-<supervisor pid>-w<slot>-<n>": the pid of its run."""
    return member.split("-w")[0].rsplit("-", 1)[1]


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["joined", "first"])
def test_a_host_killed_whole_leaves_its_tasks_to_the_other_results_exact(
    tmp_path, redis_url, victim
) -> None:
    """Two `rstreams run` of one job on their own data directories; one is killed with its
    workers (kill -9) while both hold tasks. The joined one: the first takes its tasks
    and ends exact. The first one (which reads the input): the joined one ends, saying
    so, and a new first run on a third data directory goes on from the last commit."""
    corpus = big_corpus(tmp_path, 100)  # (A must still run when B joins)
    observer = RedisGroupMembership(
        redis.Redis.from_url(redis_url), "wordcount", "wordcount", "observer"
    )
    out = tmp_path / "a.jsonl"
    common = ("--broker", redis_url, "--workers", 1)
    procs: list[subprocess.Popen[str]] = []

    def start(*args: object) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            run_cmd(*args, *common), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        procs.append(p)
        return p

    try:
        a = start("--input", corpus, "--data-dir", tmp_path / "host-a", "--output", out)
        _wait_for(lambda: a.poll() is not None or observer.task_owners(), "A's tasks")
        b = start("--join", "--data-dir", tmp_path / "host-b", "--output", tmp_path / "b.jsonl")
        both = {str(a.pid), str(b.pid)}
        _wait_for(
            lambda: (
                a.poll() is not None
                or {_host_of(m) for m in observer.task_owners().values()} == both
            ),
            "tasks on both hosts",
        )
        assert a.poll() is None, "A ended before B took tasks: make the input bigger"
        dead, other = (b, a) if victim == "joined" else (a, b)
        killed = _kill_host(dead.pid)
        assert killed and dead.wait() == -signal.SIGKILL
        _wait_for(lambda: not any(map(_chaos.alive, killed)), "the killed host's workers gone")
        _, err = other.communicate(timeout=300)
        if victim == "joined":
            # (A can not end before it ran B's tasks too: every word is counted once)
            assert other.returncode == 0, err
        else:
            assert "is gone before its input was all processed" in err
            # exit 0 means exact: a part of the answer is an error, and no table
            assert other.returncode == 1 and not (tmp_path / "b.jsonl").exists()
            a = start("--input", corpus, "--data-dir", tmp_path / "host-c", "--output", out)
            _, err = a.communicate(timeout=300)
            assert a.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_host(p.pid)
                p.wait()
    assert read_table(out) == expected_counts(corpus)
