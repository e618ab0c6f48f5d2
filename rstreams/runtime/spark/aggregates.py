"""Spark translation rules of keyed aggregations (count, sum, min, max, reduce,
aggregate; windowed ones are in :mod:`.windows`).

count, and sum/min/max where Spark's aggregates give Python's result exactly, compile to
``groupBy().agg()``; reduce/aggregate (and, in batch, the keys sum/min/max can not do
exactly) fold each key's records in source order in Python: sorted Arrow batches in
batch mode, ``applyInPandasWithState`` with the RocksDB state store in streaming mode.
Records with a None key are dropped first (see ``rstreams.semantics.nullkeys``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import attrs
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.errors import UnsupportedOperation
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.compiled import Rule, Stream, table_stream
from rstreams.runtime.spark.segments import FAILURE_MARK, StreamFold
from rstreams.runtime.spark.steps import map_values
from rstreams.semantics.aggregations import Aggregation

if TYPE_CHECKING:
    from rstreams.runtime.spark.compiler import Compiler


def _partial(comp: Compiler, s: Stream, node: n.AggregateNode) -> Stream:
    """Apply sum/min/max's function (the partial) before the shuffle."""
    return map_values(comp, s, node, node.fn, "partial")


def _aggregate(node: n.AggregateNode, comp: Compiler, ordered: bool) -> Stream:
    parent = node.parents[0]
    if comp.streaming and comp.get(parent).after_agg:
        raise UnsupportedOperation(
            f"step {node.name!r} ({node.op}) aggregates the output of another "
            "aggregation; Spark Structured Streaming runs one aggregation per query "
            "(run it in batch mode, or sink the first aggregation to a topic)"
        )
    if node.op == "count":
        return _count(node, comp, ordered)
    if node.op in ("sum", "min", "max"):
        return _combinable(node, comp, ordered)
    if comp.streaming:
        s = comp.flush(
            comp.get(parent, True), as_key=enc.PACKED, as_value=enc.PACKED, encode_step=node.name
        )
        s = comp.without_null_keys(s)
        from pyspark.sql.streaming.state import GroupStateTimeout

        fold = StreamFold(node.op, node.name, comp.policy(s), node.fn, node.initializer)
        df = s.df.groupBy("k_m").applyInPandasWithState(
            fold, StreamFold.OUTPUT, StreamFold.STATE, "Update", GroupStateTimeout.NoTimeout
        )
        return table_stream(df, enc.PACKED, enc.PACKED, ordered=True, python=True)
    s = comp.without_null_keys(comp.flush(comp.get(parent, True), encode_step=node.name))
    return comp.fold(s, node, node.op, ordered)


def _count(node: n.AggregateNode, comp: Compiler, ordered: bool) -> Stream:
    s = comp.flush(comp.get(node.parents[0], ordered), value=False, encode_step=node.name)
    s = comp.without_null_keys(s)
    kc = enc.columns("k", s.key)
    aggs = [Aggregation.of(node).spark(F, None).alias("v_l")]
    if ordered:
        aggs.append(F.max(enc.ORDER).alias(enc.ORDER))
    df = s.df.groupBy(*kc).agg(*aggs)
    if not kc:  # a global aggregation has a row even for no input
        df = df.where(F.col("v_l") > 0)
    return table_stream(df, s.key, enc.LONG, ordered=ordered, python=s.python, nonnull=True)


def _fail_inexact(node: n.AggregateNode, table: DataFrame) -> DataFrame:
    """Streaming: ``table`` failing the query at a group (``_x``) Spark's aggregate does
    not compute exactly (no Python fold of just those groups there)."""
    message = F.concat(
        F.lit(FAILURE_MARK),
        F.to_json(
            F.struct(
                F.lit(node.name).alias("step"),
                F.lit(
                    f"TypeError: {node.op}() over values of mixed or non-numeric types is not "
                    "exact on Spark Structured Streaming; use reduce()"
                ).alias("error"),
            )
        ),
    )
    return table.where(F.when(F.col("_x"), F.raise_error(message)).otherwise(F.lit(True)))


def _combinable(node: n.AggregateNode, comp: Compiler, ordered: bool) -> Stream:
    """sum/min/max: Spark's aggregates where they give Python's result exactly (all
    values of a key are ints; for min/max also all floats without NaN, or all str),
    else (batch) an exact ordered Python fold for just the keys that need it."""
    s = comp.flush(_partial(comp, comp.get(node.parents[0], ordered), node), encode_step=node.name)
    s = comp.without_null_keys(s)
    op = node.op
    kc = enc.columns("k", s.key)
    if s.value == enc.PACKED or s.value == enc.NONE or (op == "sum" and s.value == enc.STR):
        if comp.streaming:
            raise UnsupportedOperation(
                f"step {node.name!r} ({op}) over non-numeric values needs a Python fold; "
                "on Spark Structured Streaming use reduce() or aggregate() instead"
            )
        full = comp.flush(_partial(comp, comp.get(node.parents[0], True), node))
        return comp.fold(comp.without_null_keys(full), node, op, ordered)
    aggregation = Aggregation.of(node)
    aggs: list[Column] = [F.count(F.lit(1)).alias("_n")]
    results: dict[str, Column] = {}
    pure_any: list[Column] = []
    for suffix in (c.split("_", 1)[1] for c in enc.columns("v", s.value)):
        col = F.col(f"v_{suffix}")
        pure = aggregation.spark_exact(F, col, suffix, not comp.streaming)
        if pure is None:
            continue
        aggs += [pure.alias(f"_pure_{suffix}"), aggregation.spark(F, col).alias(f"_agg_{suffix}")]
        results[suffix] = F.when(F.col(f"_pure_{suffix}"), F.col(f"_agg_{suffix}"))
        pure_any.append(F.col(f"_pure_{suffix}"))
    if ordered:
        aggs.append(F.max(enc.ORDER).alias(enc.ORDER))
    grouped = s.df.groupBy(*kc).agg(*aggs)
    if not kc:
        grouped = grouped.where(F.col("_n") > 0)
    impure = ~functools.reduce(lambda a, b: a | b, pure_any, F.lit(False))
    out_cols: list[Column] = [F.col(c) for c in kc]
    for c in enc.columns("v", s.value):
        suffix = c.split("_", 1)[1]
        out_cols.append(results.get(suffix, F.lit(None).cast(enc.spark_type(c))).alias(c))
    if ordered:
        out_cols.append(F.col(enc.ORDER))
    out_cols.append(impure.alias("_x"))
    table = grouped.select(*out_cols)
    if comp.streaming:
        exact = _fail_inexact(node, table).drop("_x")
        return table_stream(exact, s.key, s.value, ordered=ordered, python=s.python)
    table = table.persist()
    comp.persisted.append(table)
    exact = table.where(~F.col("_x")).drop("_x")
    good = table_stream(exact, s.key, s.value, ordered=ordered, python=s.python)
    if table.where(F.col("_x")).isEmpty():
        return good
    # Some keys need Python's exact semantics: fold just those, in source order.
    full = comp.flush(_partial(comp, comp.get(node.parents[0], True), node), encode_step=node.name)
    rows = full.df  # (only keys of ``bad`` are kept below: never a None key)
    bad = table.where(F.col("_x")).select(*kc)
    if kc:
        cond = functools.reduce(lambda a, b: a & b, [rows[c].eqNullSafe(bad[c]) for c in kc])
        rows = rows.join(bad, cond, "left_semi")
    folded = comp.fold(attrs.evolve(full, df=rows), node, op, ordered)
    good = comp.widen(good, s.key, enc.ANY)
    return attrs.evolve(folded, df=good.df.unionByName(folded.df), python=True)


#: This module's translation rules (keyed aggregations), by node type; registered with
#: ``translate`` by :func:`rstreams.runtime.spark.rules.register_rules`, not on import.
RULES: dict[type[n.Node], Rule] = {
    n.AggregateNode: _aggregate,
}
