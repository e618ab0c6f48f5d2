"""A small user pipeline that must type-check under ``mypy --strict``.

tests/unit/test_table_type.py runs mypy on this file: the public DSL, the window specs,
the table of an aggregation and ``rstreams.run`` all have types a user's checker sees.
"""

from __future__ import annotations

import re
from datetime import timedelta

from rstreams import (
    GroupedStream,
    RStream,
    RTable,
    StreamBuilder,
    Topology,
    TumblingWindow,
    Window,
    WindowStream,
    run,
)
from rstreams.testing import TopologyTestDriver


def words(line: str) -> list[str]:
    return re.findall(r"\w+", line.lower())


PER_MINUTE: Window = TumblingWindow(timedelta(minutes=1))


def build(window: Window = PER_MINUTE) -> Topology:
    b = StreamBuilder("typed")
    lines: RStream = b.source("sentences")
    by_word: GroupedStream = lines.flatMap(words).keyBy(lambda w: w)
    counts: RTable = by_word.count()
    counts.sink("word-counts")
    updates: RStream = counts.toRStream()
    updates.filter(lambda c: c > 1).sink("repeated")
    regrouped: RTable = updates.groupByKey().max()
    regrouped.sink("max")
    windowed: WindowStream = by_word.window(window, emit="close", close_after_idle=1_000)
    per_window: RTable = windowed.aggregate(list, lambda acc, w: [*acc, w])
    per_window.toRStream().sink("per-window")
    per_window.late().print("late")
    return b.build()


def main(path: str) -> int:
    topology = build()
    with TopologyTestDriver(topology) as driver:
        driver.pipe("sentences", "a b a", timestamp=0)
        print([r.value for r in driver.read("word-counts")])
    result = run(topology, {"sentences": path})
    print(result)
    return 0
