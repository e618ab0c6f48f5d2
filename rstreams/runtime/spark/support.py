"""What the Spark backend supports, as data (importable without pyspark).

>>> from rstreams.dsl import nodes as n
>>> SUPPORTED[n.FlatMapNode].streaming
True
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from rstreams.dsl import nodes as n
from rstreams.errors import UnsupportedOperation

BACKEND = "spark"


@attrs.frozen
class Support:
    """How one node type runs on Spark."""

    batch: bool
    streaming: bool
    how: str


#: Node type -> support. A node type missing here has no translation rule.
SUPPORTED: Mapping[type[n.Node], Support] = {
    n.SourceNode: Support(
        True,
        True,
        "spark.read.text / readStream.text over files, directories or globs; "
        "non-str deserializers (json, bytes, functions) run in Python",
    ),
    n.MapNode: Support(True, True, "built-ins: native expression; else Python (Arrow batches)"),
    n.FlatMapNode: Support(True, True, "F.findall/F.words: regexp_extract_all + explode"),
    n.FilterNode: Support(True, True, "built-ins: native where(); else Python"),
    n.KeyByNode: Support(True, True, "built-ins and identity: native columns; else Python"),
    n.SelectTimestampNode: Support(
        True, True, "Python (validated); windows and joins recompile it to carry event time"
    ),
    n.PeekNode: Support(True, True, "Python, once per record (cached at fan-out)"),
    n.ForeachNode: Support(True, True, "Python on the executors"),
    n.PrintNode: Support(True, True, "collected to the driver, printed in source order"),
    n.MergeNode: Support(True, True, "unionByName"),
    n.ToRStreamNode: Support(True, True, "pass-through"),
    n.SinkNode: Support(True, True, "final table: last value per key (max_by on source order)"),
    n.AggregateNode: Support(
        True,
        True,
        "count/sum/min/max: groupBy + native aggregates; reduce/aggregate: sorted "
        "Arrow fold (batch), applyInPandasWithState on RocksDB (streaming); "
        "streaming allows one aggregation per path",
    ),
    n.WindowAggregateNode: Support(
        True,
        True,
        "batch: count/sum/min/max natively, F.window (tumbling/hopping) / "
        "F.session_window (gap; emit='close') over the selectTimestamp event time, an "
        "exact fold where values are not all ints; reduce/aggregate: sorted Arrow fold "
        "per (key, window); sessions in update mode or with reduce/aggregate: the "
        "embedded session logic replayed per key in source order (with the None of "
        "merged-away sessions); keys "
        "Windowed(key, start, end); no stream time in batch (nothing late, grace unused); "
        "streaming: every window op and emit mode, replayed per queue with stream time, "
        "lateness and end of input as on the embedded engine (stateful.py; "
        "applyInPandasWithState on RocksDB; see docs/windows.md)",
    ),
    n.LateNode: Support(
        True,
        True,
        "batch: always empty (no stream time, nothing is late); streaming: the records "
        "the window's per-queue replay finds late, as on the embedded engine",
    ),
    n.JoinNode: Support(
        True,
        True,
        "batch: windowed joins: equi-join on the join key plus the JoinWindow time range; "
        "joins without window (temporal): an as-of join, each record meets the other "
        "side's latest version of its key at or before its (event time, position), "
        "running last() per key in that order, valid for ttl; inner/left/outer; key "
        "functions and joiner in Python; streaming: windowed and temporal joins replayed "
        "per queue (buffers, versions, unmatched results, end of input) as on the "
        "embedded engine",
    ),
}


def check_supported(node: n.Node, streaming: bool) -> None:
    """Raise UnsupportedOperation naming the step unless ``node`` runs on Spark."""
    support = SUPPORTED.get(type(node))
    if support is None:
        raise UnsupportedOperation(
            f"no translation rule for {type(node).__name__} (step {node.name!r}) "
            f"on backend {BACKEND!r}"
        )
    if streaming and not support.streaming:
        raise UnsupportedOperation(
            f"step {node.name!r} ({node.kind}) is not supported by Spark Structured "
            "Streaming; run it in batch mode"
        )
    if not streaming and not support.batch:
        raise UnsupportedOperation(
            f"step {node.name!r} ({node.kind}) needs streaming mode on backend {BACKEND!r}"
        )
