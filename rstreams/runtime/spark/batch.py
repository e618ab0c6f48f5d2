"""Batch runs: bounded input read once; one Spark action per terminal step."""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.planner.topology import Topology
from rstreams.runtime.queues.redisstreams.target import RedisTarget
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.compiler import Compiler, Terminal
from rstreams.runtime.spark.redisstreams import write_stream
from rstreams.runtime.spark.segments import TableLines
from rstreams.runtime.spark.tables import (
    Failures,
    table_from_arrow,
    write_output,
    write_text_atomically,
)


def run_batch(
    comp: Compiler,
    topology: Topology,
    outputs: dict[str, str],
    collect: bool,
    failures: Failures,
    target: RedisTarget | None = None,
) -> tuple[dict[str, dict[Any, Any]], int, int]:
    """Run every terminal step; returns (tables, records in, records out). A sink that
    is a Redis stream gets its final table added as entries (on ``target``)."""
    terminals = comp.terminals()
    tables: dict[str, dict[Any, Any]] = {t: {} for t in topology.sink_topics}
    big: dict[str, list[DataFrame]] = {}
    records_out = 0
    for term in terminals:
        node = term.node
        if isinstance(node, n.SinkNode):
            df, key, value = comp.final_table(term.stream, node)
            if (spec := topology.external_sinks.get(node.topic)) is not None:
                assert target is not None  # (the runner checked)
                lines = TableLines.of(node, key, value, comp.policy(term.stream))
                write_stream(df.mapInArrow(lines, "value string"), target, spec)
            if collect:
                table, count = table_from_arrow(
                    df.toArrow(), key, value, node, comp.policy(term.stream)
                )
                tables[node.topic].update(table)
                records_out += count
            else:
                lines = TableLines.of(node, key, value, comp.policy(term.stream))
                big.setdefault(node.topic, []).append(df.mapInArrow(lines, "value string"))
        elif isinstance(node, n.PrintNode):
            _print(comp, term)
        else:  # foreach, or a peek nothing reads: run it for its side effects
            comp.flush(term.stream).df.write.format("noop").mode("overwrite").save()
    for name, _, obs in comp.observations:
        if name == "failed" and obs._jo is not None and obs._jo.future().isCompleted():
            got = obs.get
            rows = [dict(r.asDict(), native=True) for r in got.get("rows") or []]
            failures.add_native(int(got.get("failed") or 0), rows)
    records_in = _records_in(comp)
    for topic, path in outputs.items():
        if topic in big:
            frames = big[topic]
            union = frames[0]
            for other in frames[1:]:
                union = union.unionByName(other)
            write_text_atomically(comp.spark, union, path)
        elif topic in tables:
            write_output(comp.spark, tables[topic], path)
    if not collect:
        tables = {}
    return tables, records_in, records_out


def _records_in(comp: Compiler) -> int:
    """Lines read per source (the largest count any compiled scan of it observed)."""
    best: dict[str, int] = {}
    for what, topic, obs in comp.observations:
        if what == "in" and obs._jo is not None and obs._jo.future().isCompleted():
            best[topic] = max(best.get(topic, 0), int(obs.get.get("rows") or 0))
    return sum(best.values())


def _print(comp: Compiler, term: Terminal) -> None:
    node = term.node
    assert isinstance(node, n.PrintNode)
    s = comp.flush(term.stream)
    df = s.df.orderBy(enc.ORDER) if s.ordered else s.df
    cols = enc.columns("k", s.key) + enc.columns("v", s.value)
    picked: list[Any] = list(cols) or [F.lit(None).alias("_")]
    at = df.select(*picked).toArrow()
    rows = at.num_rows
    keys = enc.decode([at.column(c) for c in enc.columns("k", s.key)], s.key, rows)
    values = enc.decode([at.column(c) for c in enc.columns("v", s.value)], s.value, rows)
    prefix = f"[{node.label}] " if node.label else ""
    lines = [f"{prefix}{v}" if k is None else f"{prefix}{k}: {v}" for k, v in zip(keys, values)]
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
