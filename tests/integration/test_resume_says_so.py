"""A run that resumes a job with earlier state says so at its start (where the state is,
what it holds, --fresh to start over), and its done line tells this run's work from
what the table holds. Before: a second run with another input printed both inputs'
counts together and nothing else; a resumed run said "0 records in, 4,000,000 out"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"


def _run(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), *map(str, args)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_a_resumed_job_says_so_and_what_its_table_holds(tmp_path: Path) -> None:
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("a b\nb c\n")
    second.write_text("c d\n")
    common = ("--data-dir", tmp_path / "d", "--workers", "1", "--output", tmp_path / "o.jsonl")
    r = _run("--input", first, *common)
    assert r.returncode == 0 and "resumes" not in r.stderr, r.stderr
    r = _run("--input", second, *common)
    assert r.returncode == 0, r.stderr
    start = r.stderr.splitlines()[0]
    assert f"job 'wordcount' resumes its earlier state in {tmp_path / 'd' / 'wordcount'}" in start
    assert f"2 input records already taken in (read from {first})" in start
    assert "--fresh" in start
    done = r.stderr.splitlines()[-1]
    assert done.startswith("done: 1 records in, ") and "the table holds 4 keys" in done, done
    assert "(2 input records before this run)" in done
    r = _run("--input", second, "--fresh", *common)
    assert r.returncode == 0 and "resumes" not in r.stderr, r.stderr
