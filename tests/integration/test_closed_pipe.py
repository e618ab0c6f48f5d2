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


def _into_closed_pipe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``rstreams ARGS`` with stdout a pipe whose read end is closed before it
    starts: its first write fails, whatever the machine's speed."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "rstreams", *args], stdout=write, stderr=subprocess.PIPE,
            text=True, cwd=cwd, timeout=300,
        )  # fmt: skip
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "runtime", [["--in-memory"], ["--workers", "1"]], ids=["memory", "workers"]
)
def test_run_output_into_a_closed_pipe_exits_141(tmp_path: Path, runtime: list[str]) -> None:
    r = _into_closed_pipe(
        "run", str(WORDCOUNT), "--input", str(CORPUS), "--output", "-", "--quiet",
        "--data-dir", str(tmp_path / "d"), *runtime, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 141, r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr


def test_describe_into_a_closed_pipe_exits_141(tmp_path: Path) -> None:
    r = _into_closed_pipe("describe", str(WORDCOUNT), cwd=tmp_path)
    assert r.returncode == 141, r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
