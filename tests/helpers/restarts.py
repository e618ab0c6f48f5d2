"""A topology run by the in-process engine, restarted between parts of its input: the
records of every sink (property tests of what a restart must not change)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

from rstreams import Topology
from rstreams.runtime.engine import EngineConfig, LocalEngine
from rstreams.runtime.queues import MemoryBroker
from rstreams.serde import get_serde
from rstreams.windowed import Windowed

JSON = get_serde("json")

#: ``append(broker, lo, hi)``: put input lines ``lo`` to ``hi`` on the source topic.
Append = Callable[[MemoryBroker, int, int], None]


def run_with_restarts(
    t: Topology, config: EngineConfig, total: int, cuts: list[int], append: Append
) -> dict[str, list[tuple[Any, Any]]]:
    """The ``total`` input lines by a new engine per part (parts end at ``cuts``: a
    restart, the engine before it committed and closed): per sink topic, its records
    ``(key, value)`` (JSON), queue by queue."""
    broker = MemoryBroker()
    engine: LocalEngine | None = None
    for lo, hi in itertools.pairwise([0, *cuts, total]):
        if engine is not None:
            engine.close()
        engine = LocalEngine(t, broker, config)
        append(broker, lo, hi)
        engine.run_until_idle()
    assert engine is not None
    engine.end_of_input()
    engine.close()
    return {
        s: [
            (JSON.deserialize(r.key), None if r.value is None else JSON.deserialize(r.value))
            for q in range(broker.queue_count(s) or 0)
            for r in broker.read(s, q, 0)
        ]
        for s in t.sink_topics
    }


def label(key: Any) -> Any:
    """A key with why its window closed (``Windowed`` equality leaves that out)."""
    if isinstance(key, Windowed):
        return (key.key, key.start, key.end, key.closed)
    return key


def fold(
    records: list[tuple[Any, Any]], final: bool = True
) -> tuple[dict[Any, Any], Counter[tuple[Any, Any]]]:
    """A sink's table (last value per labelled key, a None deletes) and, if its every
    result is ``final`` (windows emitting on close, late records), every record."""
    table: dict[Any, Any] = {}
    for k, v in records:
        if v is None:
            table.pop(label(k), None)
        else:
            table[label(k)] = v
    return table, Counter((label(k), v) for k, v in records) if final else Counter()
