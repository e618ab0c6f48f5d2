"""Windowed results through the `rstreams` command: `run --output` and
`consume --format json` write the flat shape, keys and values as JSON values."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PIPELINE = """
from datetime import timedelta
from rstreams import StreamBuilder, TumblingWindow

def build():
    b = StreamBuilder("per-minute")
    lines = b.source("words").selectTimestamp(lambda line: int(line.split("\\t")[0]))
    (
        lines.keyBy(lambda line: line.split("\\t")[1])
        .window(TumblingWindow(timedelta(minutes=1)), emit="close")
        .count(name="count")
        .sink("counts")
    )
    return b
"""

WORDS = "0\tgus\n1000\tgus\n30000\tann\n61000\tgus\n"

EXPECTED = [
    {"key": "ann", "window": {"start": 0, "end": 60000}, "closed": "event-time", "value": 1},
    {"key": "gus", "window": {"start": 0, "end": 60000}, "closed": "event-time", "value": 2},
    {"key": "gus", "window": {"start": 60000, "end": 120000}, "closed": "end-of-input", "value": 1},
]


def rstreams(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def order(row: dict) -> tuple:
    return (row["window"]["start"], row["key"])


def files(tmp_path: Path) -> tuple[Path, Path]:
    pipeline = tmp_path / "p.py"
    pipeline.write_text(textwrap.dedent(PIPELINE), encoding="utf-8")
    words = tmp_path / "words.txt"
    words.write_text(WORDS, encoding="utf-8")
    return pipeline, words


def test_run_output_writes_windowed_results_flat(tmp_path: Path) -> None:
    pipeline, words = files(tmp_path)
    out = tmp_path / "out.jsonl"
    r = rstreams("run", "--in-memory", pipeline, "--input", words, "--output", out, "-q")
    assert r.returncode == 0, r.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    assert sorted(map(json.loads, lines), key=order) == EXPECTED
    expected_line = (
        '{"key": "gus", "window": {"start": 0, "end": 60000}, "closed": "event-time", "value": 2}'
    )
    assert expected_line in lines


def test_consume_format_json_prints_keys_and_values_as_json_values(tmp_path: Path) -> None:
    pipeline, words = files(tmp_path)
    data = tmp_path / "data"
    r = rstreams("run", pipeline, "--input", words, "--data-dir", data, "-q")
    assert r.returncode == 0, r.stderr
    r = rstreams("consume", "counts", "--from-beginning", "--format", "json", "--data-dir", data)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert all(list(row)[:3] == ["queue", "offset", "timestamp"] for row in rows)
    shown = [
        {k: v for k, v in row.items() if k not in ("queue", "offset", "timestamp")} for row in rows
    ]
    assert sorted(shown, key=order) == EXPECTED

    # A source topic written from a text file holds text: its values stay strings.
    r = rstreams("consume", "words", "--from-beginning", "--format", "json", "--data-dir", data)
    assert r.returncode == 0, r.stderr
    values = sorted(json.loads(line)["value"] for line in r.stdout.splitlines())
    assert values == sorted(WORDS.splitlines())


def test_consume_format_json_does_not_encode_json_keys_twice(tmp_path: Path) -> None:
    data = tmp_path / "data"
    words = tmp_path / "words.txt"
    words.write_text("gus ann gus\n", encoding="utf-8")
    r = rstreams(
        "run", ROOT / "examples" / "wordcount.py", "--input", words, "--data-dir", data, "-q"
    )
    assert r.returncode == 0, r.stderr
    r = rstreams(
        "consume", "word-counts", "--from-beginning", "--format", "json", "--data-dir", data
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert {row["key"]: row["value"] for row in rows} == {"gus": 2, "ann": 1}
