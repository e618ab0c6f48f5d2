"""``rstreams run --backend spark``, as a real subprocess (it starts its own Spark)."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def rstreams(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_runs_wordcount_on_spark(tmp_path: Path, corpus_lines: list[str]) -> None:
    text = "\n".join(corpus_lines[:300]) + "\n"
    data = tmp_path / "small.txt"
    data.write_text(text, encoding="utf-8")
    out = tmp_path / "counts.jsonl"
    r = rstreams(
        "run",
        ROOT / "examples" / "wordcount_spark.py",
        "--backend",
        "spark",
        "--master",
        "local[2]",
        "--input",
        data,
        "--output",
        out,
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    words = (w for line in text.splitlines() for w in re.findall(r"\w+", line.lower()))
    expected = collections.Counter(words)
    assert {row["key"]: row["value"] for row in rows} == dict(expected)
    assert "done: 300 records in" in r.stderr and str(out) in r.stderr


def test_cli_spark_failure_exit_1_names_step_file_and_line(
    tmp_path: Path, failing_pipeline: Callable[[Path], Path]
) -> None:
    pipeline = failing_pipeline(tmp_path / "p.py")
    data = tmp_path / "n.txt"
    data.write_text("1\n2\n0\n5\n")
    out = tmp_path / "o.jsonl"
    r = rstreams("run", pipeline, "--backend", "spark", "--input", data, "--output", out)
    assert r.returncode == 1, r.stderr
    assert "step 'numbers-map-1'" in r.stderr
    assert f"{data} line 3" in r.stderr
    assert "ZeroDivisionError" in r.stderr and "parse (p.py:3)" in r.stderr
    assert "--on-error skip" in r.stderr and "on_error=" not in r.stderr
    assert not out.exists()


def test_cli_spark_writes_dead_letters_to_the_given_file(
    tmp_path: Path, failing_pipeline: Callable[[Path], Path]
) -> None:
    pipeline = failing_pipeline(tmp_path / "p.py")
    data = tmp_path / "n.txt"
    data.write_text("1\n2\n0\n5\n")
    out, dead = tmp_path / "o.jsonl", tmp_path / "dead.jsonl"
    r = rstreams(
        "run", pipeline, "--backend", "spark", "--input", data, "--output", out,
        "--on-error", "dead-letter", "--dead-letters", dead,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (letter,) = [json.loads(line) for line in dead.read_text().splitlines()]
    assert letter["step"] == "numbers-map-1" and letter["value"] == "0"
    assert f"1 dead-lettered to {dead}" in r.stderr
