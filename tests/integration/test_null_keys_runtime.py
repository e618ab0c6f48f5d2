"""Null keys never match on the embedded runtime: in memory and with worker processes.

Aggregations skip records whose key is None, inner joins drop them and left/outer joins
emit them unmatched; an in-memory run counts them in ``RunResult.metrics``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

import rstreams
from rstreams.loader import load_topology

PIPELINE = """
from rstreams import JoinWindow, StreamBuilder

def joiner(lv, rv):
    return [lv and [lv["ts"], lv["v"]], rv and [rv["ts"], rv["v"]]]

def build():
    b = StreamBuilder("null-keys")
    src = b.source("events", deserializer="json").selectTimestamp(lambda e: e["ts"])
    src.keyBy(lambda e: e["k"]).count(name="count").sink("count")
    left = src.filter(lambda e: e["side"] == "L")
    right = src.filter(lambda e: e["side"] == "R")
    for how, window in (("join", True), ("leftJoin", True), ("outerJoin", False)):
        name = f"{how}-{'windowed' if window else 'table'}"
        joined = getattr(left, how)(right).where(lambda e: e["k"]).equalTo(lambda e: e["k"])
        if window:
            joined = joined.window(JoinWindow(before=15, after=30, grace=10))
        # Keyed by the result, the final table holds every distinct result: which of
        # several results with key None is the last depends on batching and queues.
        joined.apply(joiner, name=name).keyBy(repr).toRStream().sink(name)
    return b
"""

# Two orders ("L") and a payment ("R") without a key: they must not meet.
EVENTS = [
    {"ts": 0, "side": "L", "k": "a", "v": 1},
    {"ts": 5, "side": "L", "k": None, "v": 2},
    {"ts": 10, "side": "R", "k": None, "v": 3},
    {"ts": 12, "side": "R", "k": "a", "v": 4},
    {"ts": 20, "side": "L", "k": None, "v": 5},
    {"ts": 30, "side": "R", "k": "b", "v": 6},
]

JOINED = {
    "join-windowed": [[[0, 1], [12, 4]]],
    "leftJoin-windowed": [[[0, 1], [12, 4]], [[5, 2], None], [[20, 5], None]],
    "outerJoin-table": [
        [[0, 1], None],
        [[0, 1], [12, 4]],
        [[5, 2], None],
        [None, [10, 3]],
        [[20, 5], None],
        [None, [30, 6]],
    ],
}
EXPECTED = {
    "count": {"a": 2, "b": 1},
    **{name: {repr(r): r for r in results} for name, results in JOINED.items()},
}


def setup(tmp_path: Path) -> tuple[Path, Any, dict[str, str]]:
    pipeline = tmp_path / "null_keys.py"
    pipeline.write_text(textwrap.dedent(PIPELINE), encoding="utf-8")
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS), encoding="utf-8")
    return pipeline, load_topology(str(pipeline)), {"events": str(events)}


def test_in_memory_run_skips_and_counts_null_keys(tmp_path: Path) -> None:
    _, topology, inputs = setup(tmp_path)
    result = rstreams.run(topology, inputs)
    assert result.tables == EXPECTED
    # 3 records without a key, seen by the count and by each of the three joins.
    assert result.metrics["null_keys"] == 12


@pytest.mark.slow
def test_durable_run_with_two_workers_skips_null_keys(tmp_path: Path) -> None:
    pipeline, topology, inputs = setup(tmp_path)
    result = rstreams.run(
        topology, inputs, workers=2, data_dir=str(tmp_path / "data"), pipeline=str(pipeline)
    )
    assert result.tables == EXPECTED
