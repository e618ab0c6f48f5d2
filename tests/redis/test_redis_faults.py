"""Redis faults during a run are never silent: a restart with its data (AOF) is ridden
out exactly; a server that came back without its data, or a stream of the job deleted
or trimmed under it, stops the run with an error naming the stream (exit != 0).

Real servers (redisserver.py), restarted by pid; every wait is on a condition.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from redisserver import RedisServer
from test_run_redis import big_corpus, expected_counts, read_table, run_cmd
from test_runtime_redis import _chaos

pytestmark = pytest.mark.slow


def _wait_for(predicate, what: str, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    """Wait until ``predicate()`` (Redis errors count as "not yet"); the run must not end
    first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except redis.RedisError:
            pass
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[1]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _committed(client: redis.Redis) -> int:
    """The sum of the offsets the word count committed on its input topic."""
    total = 0
    for field, offset in client.hgetall("rs:{wordcount}:offsets:wordcount").items():
        if field.startswith(b"sentences:"):
            total += int(offset)
    return total


#: examples/wordcount.py at a pace no machine can beat: a line takes at least 0.1 ms, so
#: a pull of 5,000 lines of a queue takes at least 0.5 s and a worker's round over its
#: four queues at least 2 s. With three pulls per queue (_lost_run's paced input), a fault
#: injected within 2 s of the first commit always meets records the job still needs,
#: however fast the machine (a whole queue in one pull would be committed whole by the
#: first commit: that raced the fault).
_PACED_WORDCOUNT = """
import re, time
from rstreams import StreamBuilder
WORD = re.compile(r"\\w+")
def words(line):
    time.sleep(0.0001)
    return WORD.findall(line.lower())
def build():
    b = StreamBuilder("wordcount")
    b.source("sentences").flatMap(words).keyBy(lambda w: w).count().toRStream().sink("word-counts")
    return b
"""


def _start(
    tmp_path: Path, server: RedisServer, corpus: Path, *, paced: bool = False
) -> subprocess.Popen:
    cmd = run_cmd("--input", corpus, "--broker", server.url, "--workers", 2,
                "--data-dir", tmp_path / "data", "--output", tmp_path / "counts.jsonl")  # fmt: skip
    if paced:
        pipeline = tmp_path / "wordcount.py"
        pipeline.write_text(_PACED_WORDCOUNT, encoding="utf-8")
        cmd[cmd.index("run") + 1] = str(pipeline)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_redis_restarted_with_its_data_mid_run_results_exact(tmp_path, sig):
    corpus = big_corpus(tmp_path, 6)
    server = RedisServer(tmp_path / "redis").start()  # appendonly yes, appendfsync always
    try:
        client = redis.Redis(port=server.port)
        proc = _start(tmp_path, server, corpus)
        _wait_for(lambda: _committed(client) > 0, "a first commit", proc)
        server.restart(sig)
        code, err = _finish(proc)
    finally:
        server.stop()
    assert code == 0, err
    # the restart hit the run: the supervisor, or a worker it replaced, lost the server
    assert "lost the broker" in err or "starting a replacement" in err, err
    assert read_table(tmp_path / "counts.jsonl") == expected_counts(corpus)


def _lost_run(tmp_path: Path, fault, *, paced: bool = False) -> tuple[int, str]:
    """A run whose data ``fault`` loses after its first commit. ``paced``: the faults
    that need records the job has not committed yet get the paced word count over
    87,000 lines (10,900 a source queue, three pulls); the others a plain one."""
    corpus = big_corpus(tmp_path, 14 if paced else 6)
    server = RedisServer(tmp_path / "redis", persist=False).start()
    try:
        client = redis.Redis(port=server.port)
        proc = _start(tmp_path, server, corpus, paced=paced)
        _wait_for(lambda: _committed(client) > 0, "a first commit", proc)
        fault(server, client, proc)
        return _finish(proc)
    finally:
        server.stop()


def _assert_lost(code: int, err: str) -> None:
    assert code not in (0, None), err
    assert "lost data on Redis" in err, err
    assert "rs:{wordcount}:" in err, err  # the stream
    assert "offset" in err and "--fresh" in err, err  # the position and what to do


def test_redis_restarted_without_its_data_stops_the_run(tmp_path):
    _assert_lost(*_lost_run(tmp_path, lambda server, client, proc: server.restart()))


def test_a_stream_deleted_under_the_job_stops_the_run(tmp_path):
    def delete(server, client, proc):
        client.delete("rs:{wordcount}:q:sentences:0")

    _assert_lost(*_lost_run(tmp_path, delete))


#: XTRIM of a source queue, in one step with the check that the job still needs some of
#: it (its committed offset below its end): KEYS the stream, the offsets and ends hashes;
#: ARGV the queue's field. 1 if trimmed.
_TRIM_IF_NEEDED = """
local committed = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local e = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
if committed >= e then return 0 end
redis.call('XTRIM', KEYS[1], 'MAXLEN', 0)
return 1
"""


def test_a_stream_trimmed_under_the_job_stops_the_run(tmp_path):
    """Records the job still needs trimmed away. Its workers are killed first, so their
    replacements read every source queue again from its committed offset (a worker that
    had already read a whole queue into its cache would otherwise finish it exactly and
    rightly exit 0, as when trimmed records were committed: test_faults_redis.py)."""

    def trim(server, client, proc):
        killed = _chaos.worker_pids(proc.pid)
        assert killed, "no worker to kill"
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        keys = ["rs:{wordcount}:offsets:wordcount", "rs:{wordcount}:ends"]
        trimmed = [
            q
            for q in range(8)
            if client.eval(
                _TRIM_IF_NEEDED, 3, f"rs:{{wordcount}}:q:sentences:{q}", *keys, f"sentences:{q}"
            )
        ]
        assert trimmed, "every source queue was committed up to its end at the first commit"

    _assert_lost(*_lost_run(tmp_path, trim, paced=True))
