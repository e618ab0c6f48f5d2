"""Structured Streaming runs: one query per terminal step, each with its checkpoint.

Stateful steps keep their state in Spark's RocksDB state store (changelog
checkpointing), inside the query's checkpoint. A sink's final table is kept next to the
checkpoint and updated by ``foreachBatch`` with each micro-batch's changed keys, tagged
with the batch id (a batch Spark replays after a crash is not applied twice), and the
output file is rewritten atomically after every batch. Running again with the same
checkpoint reads only the new files and continues every count.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from rstreams.dsl import nodes as n
from rstreams.planner.topology import Topology
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark import stateful
from rstreams.runtime.spark.compiler import (
    STREAM_METRIC_PREFIX,
    Compiler,
    Stream,
    Terminal,
    last_per_key,
)
from rstreams.runtime.spark.segments import ErrorPolicy
from rstreams.runtime.spark.tables import (
    Failures,
    read_bytes,
    table_from_arrow,
    write_bytes_atomically,
    write_output,
)
from rstreams.serde import INTERNAL_SERDE

log = logging.getLogger("rstreams.spark")


class SinkTable:
    """The final table of one sink step, kept across micro-batches and runs."""

    def __init__(
        self,
        spark: SparkSession,
        node: n.SinkNode,
        stream: Stream,
        state_path: str,
        output: str | None,
        policy: ErrorPolicy,
    ) -> None:
        self.spark = spark
        self.node = node
        self.key, self.value, self.unique = stream.key, stream.value, stream.unique
        self.state_path = state_path
        self.output = output
        self.policy = policy
        self.batch = -1
        self.records = 0
        self.table: dict[Any, Any] = {}
        data = read_bytes(spark, state_path)
        if data is not None:
            saved = INTERNAL_SERDE.deserialize(data)
            self.batch = saved["batch"]
            self.table = dict(saved["rows"])

    def process(self, df: DataFrame, batch_id: int) -> None:
        if batch_id <= self.batch:
            return  # a replayed batch: already in the table
        final = last_per_key(df, self.key, self.value, self.unique)
        table, count = table_from_arrow(
            final.toArrow(), self.key, self.value, self.node, self.policy
        )
        self.table.update(table)
        self.records += count
        self.batch = batch_id
        state = {"batch": batch_id, "rows": [[k, v] for k, v in self.table.items()]}
        write_bytes_atomically(self.spark, INTERNAL_SERDE.serialize(state), self.state_path)
        if self.output is not None:
            write_output(self.spark, self.table, self.output)


def _printer(node: n.PrintNode, s: Stream) -> Callable[[DataFrame, int], None]:
    prefix = f"[{node.label}] " if node.label else ""

    def handle(df: DataFrame, batch_id: int) -> None:
        if s.ordered:
            df = df.orderBy(enc.ORDER)
        at = df.toArrow()
        rows = at.num_rows
        keys = enc.decode([at.column(c) for c in enc.columns("k", s.key)], s.key, rows)
        values = enc.decode([at.column(c) for c in enc.columns("v", s.value)], s.value, rows)
        for k, v in zip(keys, values):
            sys.stdout.write(f"{prefix}{v}\n" if k is None else f"{prefix}{k}: {v}\n")
        sys.stdout.flush()

    return handle


def _run_for_effects(df: DataFrame, batch_id: int) -> None:
    df.write.format("noop").mode("overwrite").save()


def _records_read(queries: list[Any]) -> int:
    """Input lines read: per source, the fewest any query read (a query whose plan reads
    a source in two branches, e.g. both sides of a join, counts its rows twice); the
    end-of-input markers are not records."""
    fewest: dict[str, int] = {}
    for q in queries:
        rows: dict[str, int] = {}
        for p in q.recentProgress:
            for s in p.sources:
                where = s.description or ""
                if not stateful.is_marker_source(where):
                    rows[where] = rows.get(where, 0) + (s.numInputRows or 0)
        for where, count in rows.items():
            fewest[where] = min(fewest.get(where, count), count)
    return sum(fewest.values())


def run_streaming(
    comp: Compiler,
    topology: Topology,
    outputs: dict[str, str],
    checkpoint: str,
    trigger_once: bool,
    failures: Failures,
) -> tuple[dict[str, dict[Any, Any]], int, int]:
    """Run one query per terminal step until a bounded run's input is read (or, for a
    continuous run, until interrupted): the final table of every sink topic, the input
    lines read and the records written."""
    base = checkpoint.rstrip("/")
    comp.markers = f"{base}/{stateful.MARKERS}"
    if stateful.uses_markers(comp.pipeline):
        # Windows and joins learn that a bounded run's input ends from a marker file.
        stateful.prepare_end_of_input(comp.spark, comp.markers, bounded=trigger_once)
    terminals = comp.terminals()
    sinks_per_topic: dict[str, int] = {}
    for term in terminals:
        if isinstance(term.node, n.SinkNode):
            sinks_per_topic[term.node.topic] = sinks_per_topic.get(term.node.topic, 0) + 1
    queries: list[Any] = []
    holders: list[SinkTable] = []
    for term in terminals:
        query, holder = _start_query(comp, term, outputs, sinks_per_topic, base, trigger_once)
        queries.append(query)
        if holder is not None:
            holders.append(holder)
    _await(queries)
    tables = _sink_tables(comp.spark, topology, holders, outputs, sinks_per_topic)
    failures.add_native(_native_failures(queries), [])
    return tables, _records_read(queries), sum(h.records for h in holders)


def _start_query(
    comp: Compiler,
    term: Terminal,
    outputs: dict[str, str],
    sinks_per_topic: dict[str, int],
    base: str,
    trigger_once: bool,
) -> tuple[Any, SinkTable | None]:
    """Start the query of terminal step ``term`` (checkpoint ``<base>/<step>``): a sink
    keeps its final table (and writes its output, if it alone sinks to its topic), a
    print step prints, any other runs for its effects."""
    node = term.node
    s = comp.flush(term.stream, encode_step=node.name)
    handler: Callable[[DataFrame, int], None]
    holder = None
    if isinstance(node, n.SinkNode):
        output = outputs.get(node.topic) if sinks_per_topic[node.topic] == 1 else None
        holder = SinkTable(comp.spark, node, s, f"{base}/{node.name}.table", output, comp.policy(s))
        handler = holder.process
    elif isinstance(node, n.PrintNode):
        handler = _printer(node, s)
    else:
        handler = _run_for_effects
    writer = (
        s.df.writeStream.option("checkpointLocation", f"{base}/{node.name}")
        .outputMode("update" if s.after_agg else "append")
        .foreachBatch(handler)
    )
    writer = (
        writer.trigger(availableNow=True)
        if trigger_once
        else writer.trigger(processingTime="1 second")
    )
    return writer.start(), holder


def _await(queries: list[Any]) -> None:
    """Wait for every query to end (an interrupt stops them all)."""
    try:
        for q in queries:
            q.awaitTermination()
    except KeyboardInterrupt:
        log.warning("interrupted: stopping %d streaming queries", len(queries))
    finally:
        for q in queries:
            if q.isActive:
                q.stop()


def _sink_tables(
    spark: SparkSession,
    topology: Topology,
    holders: list[SinkTable],
    outputs: dict[str, str],
    sinks_per_topic: dict[str, int],
) -> dict[str, dict[Any, Any]]:
    """The final table of each sink topic; a topic several sinks write to gets its
    output written here, from all of them."""
    tables: dict[str, dict[Any, Any]] = {t: {} for t in topology.sink_topics}
    for holder in holders:
        tables[holder.node.topic].update(holder.table)
    for topic, count in sinks_per_topic.items():
        if count > 1 and topic in outputs:
            write_output(spark, tables[topic], outputs[topic])
    return tables


def _native_failures(queries: list[Any]) -> int:
    """Records native steps dropped (on_error skip): summed over a query's batches; a
    step upstream of several sinks is observed by each of their queries: once."""
    failed: dict[str, int] = {}
    for q in queries:
        mine: dict[str, int] = {}
        for p in q.recentProgress:
            for name, row in (p.observedMetrics or {}).items():
                if name.startswith(STREAM_METRIC_PREFIX):
                    mine[name] = mine.get(name, 0) + int(row.asDict().get("failed") or 0)
        for name, count in mine.items():
            failed[name] = max(failed.get(name, 0), count)
    return sum(failed.values())
