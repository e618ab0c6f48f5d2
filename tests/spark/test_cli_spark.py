"""``rstreams run --backend spark``, as a real subprocess (it starts its own Spark)."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.processes import assert_nothing_left, marked_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def rstreams(*args: object, mark: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m rstreams ARGS`` (under the lying PATH of conftest.py); with ``mark``,
    every process it starts carries it (tests/helpers/processes.py)."""
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=marked_env(mark) if mark else None,
    )


def test_cli_runs_wordcount_on_spark(tmp_path: Path, corpus_text: str) -> None:
    """examples/wordcount_spark.py (built-in functions: native Spark SQL) on the corpus,
    with a lying PATH: its --output table is the embedded run's, and is the word count;
    and the run leaves no process behind."""
    corpus = ROOT / "examples" / "data" / "corpus.txt"
    out, embedded_out = tmp_path / "counts.jsonl", tmp_path / "embedded.jsonl"
    common = ["run", ROOT / "examples" / "wordcount_spark.py", "--input", corpus]
    mark = uuid.uuid4().hex
    r = rstreams(*common, "--backend", "spark", "--master", "local[2]", "--output", out, mark=mark)
    assert r.returncode == 0, r.stderr
    embedded = rstreams(*common, "--in-memory", "--output", embedded_out)
    assert embedded.returncode == 0, embedded.stderr
    words = (w for line in corpus_text.splitlines() for w in re.findall(r"\w+", line.lower()))
    expected = collections.Counter(words)
    assert read_table(out) == read_table(embedded_out) == dict(expected)
    lines = len(corpus_text.splitlines())
    assert f"done: {lines:,} records in" in r.stderr and str(out) in r.stderr
    assert_nothing_left(mark)


def read_table(path: Path) -> dict[str, object]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {row["key"]: row["value"] for row in rows}


def test_cli_spark_failure_exit_1_names_step_file_and_line(
    tmp_path: Path, failing_pipeline: Callable[[Path], Path]
) -> None:
    """Exit 1 with the step, input line and function of the failure; no output, and no
    process of the failed run left behind."""
    pipeline = failing_pipeline(tmp_path / "p.py")
    data = tmp_path / "n.txt"
    data.write_text("1\n2\n0\n5\n")
    out = tmp_path / "o.jsonl"
    mark = uuid.uuid4().hex
    r = rstreams("run", pipeline, "--backend", "spark", "--input", data, "--output", out, mark=mark)
    assert r.returncode == 1, r.stderr
    assert "step 'numbers-map-1'" in r.stderr
    assert f"{data} line 3" in r.stderr
    assert "ZeroDivisionError" in r.stderr and "parse (p.py:3)" in r.stderr
    assert "--on-error skip" in r.stderr and "on_error=" not in r.stderr
    assert not out.exists()
    assert_nothing_left(mark)


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
