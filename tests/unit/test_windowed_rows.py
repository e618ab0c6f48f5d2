"""Windowed results in the Python API and in the flat rows every writer of results
uses: the key, the window beside it (never inside it) and ``closed`` as its own field."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta

import pytest

import rstreams
from rstreams import StreamBuilder, TumblingWindow, Windowed
from rstreams.runtime.results import RunResult, write_table
from rstreams.testing import TopologyTestDriver
from rstreams.windowed import TimeWindow, result_row

LINES = ["0\tgus", "1000\tgus", "30000\tann", "61000\tgus"]


def per_minute(emit: str = "update") -> rstreams.Topology:
    b = StreamBuilder("per-minute")
    (
        b.source("words", queues=1)
        .selectTimestamp(lambda line: int(line.split("\t")[0]))
        .keyBy(lambda line: line.split("\t")[1])
        .window(TumblingWindow(timedelta(minutes=1)), emit=emit)
        .count(name="count", queues=1)
        .sink("counts")
    )
    return b.build()


def test_a_windowed_key_exposes_key_and_window_bounds() -> None:
    w = Windowed("gus", 0, 60_000, closed="event-time")
    assert (w.key, w.window.start, w.window.end, w.closed) == ("gus", 0, 60_000, "event-time")
    assert w.window == TimeWindow(0, 60_000)
    assert str(w) == "gus (window 0..60000, closed: event-time)"


def test_result_rows_are_flat() -> None:
    assert result_row(Windowed("gus", 0, 60_000), 3) == {
        "key": "gus",
        "window": {"start": 0, "end": 60_000},
        "value": 3,
    }
    assert result_row(Windowed("gus", 0, 60_000, closed="idle"), 3) == {
        "key": "gus",
        "window": {"start": 0, "end": 60_000},
        "closed": "idle",
        "value": 3,
    }
    assert result_row("gus", 3) == {"key": "gus", "value": 3}


def test_driver_read_gives_windowed_keys_with_their_window() -> None:
    with TopologyTestDriver(per_minute()) as driver:
        for line in LINES:
            driver.pipe("words", line)
        got = [
            (r.key.key, r.key.window.start, r.key.window.end, r.value)
            for r in driver.read("counts")
        ]
    assert got == [
        ("gus", 0, 60_000, 1),
        ("gus", 0, 60_000, 2),
        ("ann", 0, 60_000, 1),
        ("gus", 60_000, 120_000, 1),
    ]


def test_run_result_rows_and_output_lines_share_the_flat_shape(tmp_path) -> None:
    source = tmp_path / "words.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    result = rstreams.run(per_minute(emit="close"), {"words": str(source)})
    expected = [
        {"key": "ann", "window": {"start": 0, "end": 60_000}, "closed": "event-time", "value": 1},
        {"key": "gus", "window": {"start": 0, "end": 60_000}, "closed": "event-time", "value": 2},
        {
            "key": "gus",
            "window": {"start": 60_000, "end": 120_000},
            "closed": "end-of-input",
            "value": 1,
        },
    ]

    def order(row: dict) -> tuple:
        return (row["window"]["start"], row["key"])

    assert sorted(result.rows("counts"), key=order) == expected
    out = io.StringIO()
    write_table(result.tables["counts"], out)
    lines = out.getvalue().splitlines()
    assert sorted(map(json.loads, lines), key=order) == expected
    assert (
        '{"key": "gus", "window": {"start": 0, "end": 60000}, "closed": "event-time", "value": 2}'
        in lines
    )


def test_run_result_rows_of_an_unknown_topic_names_the_sinks() -> None:
    result = RunResult({"counts": {}}, 0, 0, 0.0, {})
    with pytest.raises(KeyError, match=re.escape("its sinks are ['counts']")):
        result.rows("count")


def test_a_windowed_key_nested_in_a_value_is_written_flat_too() -> None:
    out = io.StringIO()
    write_table({"last": Windowed("gus", 0, 10)}, out)
    assert json.loads(out.getvalue()) == {
        "key": "last",
        "value": {"key": "gus", "window": {"start": 0, "end": 10}},
    }
