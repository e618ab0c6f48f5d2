"""A low open files limit (``ulimit -n``) stops a run in one line naming the limit and
what to do, never a traceback (before: EMFILE's traceback from the supervisor, or
workers restarted until --max-restarts with their tracebacks in the message)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import CORPUS, WORDCOUNT, expected_counts, read_jsonl


@pytest.mark.parametrize("limit", [24, 40, 128])
@pytest.mark.parametrize("workers", [[], ["--workers", "1"]], ids=["default", "one-worker"])
def test_too_many_open_files_is_one_line(tmp_path: Path, limit: int, workers: list[str]) -> None:
    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    out = tmp_path / "counts.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), "--input", str(CORPUS),
         "--data-dir", str(tmp_path / "data"), "--output", str(out), "-q", *workers],
        capture_output=True, text=True, timeout=300, preexec_fn=low_limit,
    )  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    if r.returncode == 0:  # (enough at this limit)
        assert read_jsonl(out) == dict(expected_counts(CORPUS))
        return
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(
        f"rstreams: error: too many open files: the limit is {limit} (ulimit -n); raise it"
    ), r.stderr
    assert "run the same command again" in r.stderr
