"""Nexmark queries (examples/nexmark) on Spark, batch and Structured Streaming: the
table each writes (``outputs=``, the lines ``rstreams run --output`` writes) is the
plain-Python baseline's (bench/nexmark/baseline.py), byte for byte, as
tests/integration/test_nexmark.py checks on the embedded runtime. Every query of
``baseline.QUERIES``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rstreams.errors import UnsupportedOperation
from rstreams.loader import load_topology
from rstreams.runtime.spark import run_spark
from tests.helpers.nexmark import EXAMPLES, QUERIES, expected_lines, write_events

pytestmark = pytest.mark.slow

#: Queries with a stateful step after another (a join, then an aggregation): Structured
#: Streaming runs one stateful step per query and refuses them, naming the step.
TWO_STATEFUL_STEPS = {"q4", "q9"}


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding one events file (Structured Streaming reads directories).

    Small for Spark, and slow in event time: 3,000 events, 20 per second, 150 s of event
    time: 16 tumbling windows of 10 s, and bidders who stop bidding for more than the
    10 s session gap (27 of the 60 bidders have two sessions or more), besides sessions
    merged by late bids."""
    inbox = tmp_path_factory.mktemp("nexmark") / "events"
    inbox.mkdir()
    write_events(inbox / "events.jsonl", 3_000)
    return inbox


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
@pytest.mark.parametrize("query", QUERIES)
def test_each_query_on_spark_equals_the_plain_python_baseline(
    spark: Any, tmp_path: Path, events: Path, query: str, streaming: bool
) -> None:
    topology = load_topology(str(EXAMPLES / f"{query}.py"))
    (sink,) = topology.sink_topics
    out = tmp_path / "out.jsonl"
    run: dict[str, Any] = {"spark": spark, "outputs": {sink: str(out)}}
    if streaming:
        run.update(streaming=True, checkpoint=str(tmp_path / "checkpoint"))
    if streaming and query in TWO_STATEFUL_STEPS:
        with pytest.raises(UnsupportedOperation, match="one aggregation per query"):
            run_spark(topology, {"events": str(events)}, **run)
        return
    run_spark(topology, {"events": str(events)}, **run)
    expected = expected_lines(query, events / "events.jsonl", tmp_path)
    assert out.read_text().splitlines() == expected
