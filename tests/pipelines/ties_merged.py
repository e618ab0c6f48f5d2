"""The ties pipeline (tests/pipelines/ties.py) with its steps' late records merged into
one sink: the four windowed steps make one sub-topology, whose task reads four
shuffles from the same producers and must judge each by that shuffle's own time
(tests/integration/test_ties_property.py). Two source queues: each shuffle has two
producers, so carries their watermarks (the input is in time order)."""

from __future__ import annotations

import runpy
from pathlib import Path

from rstreams import StreamBuilder

TIES = runpy.run_path(str(Path(__file__).resolve().parent / "ties.py"))


def build() -> StreamBuilder:
    return TIES["pipeline"](source_queues=2, merged_late=True)


def lines() -> dict[str, list[str]]:
    return TIES["lines"]()
