"""One job, one run: a second run on the same data directory and job fails at once
(exit 2, naming the run that holds it) instead of ingesting the input a second time;
a lock left by a dead run does not block."""

from __future__ import annotations

import doctest
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rstreams.errors import JobRunningError
from rstreams.runtime.queues import joblock
from rstreams.runtime.queues.joblock import JobLock

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"


def rstreams(*args: object, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        **kw,  # type: ignore[arg-type]
    )


def test_docstring_examples() -> None:
    assert doctest.testmod(joblock).failed == 0


def test_a_second_run_of_a_running_job_fails_at_once_with_exit_2(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b a\n" * 1000)
    data = tmp_path / "data"
    first = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), "--input", str(corpus),
         "--data-dir", str(data), "--workers", "1", "--follow", "--output",
         str(tmp_path / "first.jsonl")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (data / "wordcount" / "logs").exists():  # the first run holds the lock
            assert first.poll() is None, first.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        started = time.monotonic()
        second = rstreams("run", WORDCOUNT, "--input", corpus, "--data-dir", data, "--fresh")
        assert time.monotonic() - started < 20
        assert second.returncode == 2, second.stderr
        assert f"job 'wordcount' is already running (pid {first.pid}, since " in second.stderr
        assert (data / "wordcount").exists()  # --fresh deleted nothing of the running job
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    # The lock went with the run: the next one runs, resumes, and counts each line once.
    third = rstreams("run", WORDCOUNT, "--input", corpus, "--data-dir", data, "--output", "-")
    assert third.returncode == 0, third.stderr
    assert '{"key": "a", "value": 2000}' in third.stdout


def test_a_lock_left_by_a_killed_run_does_not_block(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from rstreams.runtime.queues.joblock import JobLock; "
         "JobLock(sys.argv[1], 'job').acquire(); print('held', flush=True); time.sleep(600)",
         str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(JobRunningError, match=f"pid {holder.pid}"):
            JobLock(tmp_path, "job").acquire()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    JobLock(tmp_path, "job").acquire().release()
    # Another job of the same data directory was never blocked.
    JobLock(tmp_path, "other").acquire().release()
