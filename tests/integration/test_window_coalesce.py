"""Windowed aggregations in update mode send each window's latest update per commit, as
other aggregations do: a hopping window of 10 s advancing 1 s wrote ten records to its
sink topic per input record before (110,000 inputs, 1,100,000 sink records)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PIPELINE = """
from datetime import timedelta
from rstreams import HoppingWindow, StreamBuilder

def build():
    b = StreamBuilder("views")
    (b.source("views", deserializer="json")
        .selectTimestamp(lambda v: v["ts"])
        .keyBy(lambda v: v["page"])
        .window(HoppingWindow(timedelta(seconds=10), timedelta(seconds=1)))
        .count()
        .sink("per-page"))
    return b
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["--in-memory"], ["--workers", "1"]], ids=["memory", "workers"])
def test_a_hopping_window_sends_far_fewer_records_than_updates(
    tmp_path: Path, mode: list[str]
) -> None:
    pipeline = tmp_path / "views.py"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    views = [{"page": f"/p{i % 5}", "ts": 1_700_000_000_000 + i * 10} for i in range(5_000)]
    src = tmp_path / "views.jsonl"
    src.write_text("".join(json.dumps(v) + "\n" for v in views))
    out, data = tmp_path / "out.jsonl", tmp_path / "d"
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", str(pipeline), "--input", str(src),
         "--output", str(out), "--data-dir", str(data), "-q", *mode],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    expected: collections.Counter[tuple[str, int]] = collections.Counter()
    for v in views:
        for start in range(v["ts"] - v["ts"] % 1000 - 9000, v["ts"] + 1, 1000):
            if start >= 0 and start <= v["ts"] < start + 10_000:
                expected[(v["page"], start)] += 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(row["key"], row["window"]["start"]): row["value"] for row in rows} == expected
    if mode == ["--in-memory"]:
        return
    c = subprocess.run(
        [sys.executable, "-m", "rstreams", "consume", "per-page", "--from-beginning",
         "--data-dir", str(data), "--job", "views"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert c.returncode == 0, c.stderr
    sent = len(c.stdout.splitlines())
    updates = sum(expected.values())  # (one per record and window)
    assert len(expected) <= sent < updates / 5, (sent, updates, len(expected))
