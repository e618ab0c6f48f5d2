"""A reader that went away means the output was not delivered: ``rstreams run ...
--output -`` (and any command printing to stdout) into a closed pipe exits 141, as Unix
tools killed by SIGPIPE do, without a traceback. Before, it exited 0 saying nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
CORPUS = ROOT / "examples" / "data" / "corpus.txt"


def _into_closed_pipe(
    *args: str, cwd: Path, buffered: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``rstreams ARGS`` with stdout a pipe whose read end is closed before it
    starts: its first write fails, whatever the machine's speed. ``buffered``: stdout
    block-buffered, as a user's (no PYTHONUNBUFFERED): a short output fails only when
    flushed, which Python otherwise does at exit ("Exception ignored", exit 120)."""
    env = dict(os.environ)
    if buffered:
        env.pop("PYTHONUNBUFFERED", None)
    else:
        env["PYTHONUNBUFFERED"] = "1"
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "rstreams", *args], stdout=write, stderr=subprocess.PIPE,
            text=True, cwd=cwd, env=env, timeout=300,
        )  # fmt: skip
    finally:
        os.close(write)


def _assert_141(r: subprocess.CompletedProcess[str]) -> None:
    assert r.returncode == 141, r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
@pytest.mark.parametrize(
    "runtime", [["--in-memory"], ["--workers", "1"]], ids=["memory", "workers"]
)
def test_run_output_into_a_closed_pipe_exits_141(
    tmp_path: Path, runtime: list[str], buffered: bool
) -> None:
    wordcount = ["run", str(WORDCOUNT), "--input", str(CORPUS), "--output", "-", "--quiet"]
    run = [*wordcount, "--data-dir", str(tmp_path / "d"), *runtime]
    _assert_141(_into_closed_pipe(*run, cwd=tmp_path, buffered=buffered))
    # Only the delivery failed: the job's committed work is whole (a durable job's rerun
    # resumes it) and its table is the one a run with a reader prints.
    again, fresh = (
        subprocess.run([sys.executable, "-m", "rstreams", *args], capture_output=True,
                       text=True, cwd=tmp_path, timeout=300)
        for args in (run, [*wordcount, "--in-memory"])
    )  # fmt: skip
    assert again.returncode == 0 and fresh.returncode == 0, again.stderr + fresh.stderr
    assert again.stdout == fresh.stdout and again.stdout


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
def test_describe_into_a_closed_pipe_exits_141(tmp_path: Path, buffered: bool) -> None:
    _assert_141(_into_closed_pipe("describe", str(WORDCOUNT), cwd=tmp_path, buffered=buffered))


def test_short_outputs_of_other_commands_into_a_closed_pipe_exit_141(tmp_path: Path) -> None:
    """Block-buffered, a short output is written only at the end: still 141."""
    data = str(tmp_path / "d")
    ok = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), "--input", str(CORPUS),
         "--data-dir", data, "--workers", "1", "--quiet"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    for args in (
        ["topics", "list", "--data-dir", data, "--job", "wordcount"],
        ["state", "list", "--data-dir", data, "--job", "wordcount"],
        ["top", "--data-dir", data, "wordcount", "--once"],
        ["--help"],
    ):
        _assert_141(_into_closed_pipe(*args, cwd=tmp_path, buffered=True))
