"""Spark translation rules of the record-at-a-time steps: sources, map, flatMap, filter,
keyBy, the Python-only steps (selectTimestamp, peek, foreach), merge, and the steps that
pass their input on (sinks, print, toRStream; the runner reads those).

A built-in with a native form (:mod:`.native`) becomes Spark SQL expressions; anything
else is added to the stream's pending Python steps, fused into one ``mapInArrow`` when
something native needs the columns (``Compiler.flush``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from pyspark.sql import Column, Observation
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.errors import UnsupportedOperation
from rstreams.functions import Builtin
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.compiled import Rule, Stream, field_of, is_identity
from rstreams.runtime.spark.native import Native, translate_flat, translate_map, truthy
from rstreams.runtime.spark.segments import PyStep
from rstreams.serde import Serde, StrSerde

if TYPE_CHECKING:
    from rstreams.runtime.spark.compiler import Compiler


@attrs.frozen
class _Decode:
    """Source deserializer over the text of a line (Spark reads lines as str)."""

    serde: Serde

    def __call__(self, line: str) -> Any:
        return self.serde.deserialize(line.encode("utf-8"))


def _be(col: Column, digits: int) -> Column:
    """Fixed-width big-endian bytes of a non-negative integer column."""
    return F.unhex(F.lpad(F.hex(col), digits, "0"))


def _source(node: n.SourceNode, comp: Compiler, ordered: bool) -> Stream:
    info = comp.sources[node.topic]
    if info.redis is not None:
        return _redis_source(node, comp, ordered)
    number: int | None = None
    if comp.streaming:
        cols = [F.col("value").alias("v_s")]
        if ordered:
            cols += [
                F.col("_metadata.file_path").alias("_f"),
                F.col("_metadata.file_block_start").alias("_b"),
            ]
            number = info.index
        df = comp.spark.readStream.text(info.paths[0]).select(*cols)
    else:
        cols = [F.col("value").alias("v_s")]
        if ordered:
            cols.append(
                F.concat(
                    F.lit(info.index.to_bytes(2, "big")),
                    F.encode(F.col("_metadata.file_path"), "UTF-8"),
                    F.lit(b"\x00"),
                    _be(F.col("_metadata.file_block_start"), 16),
                    _be(F.monotonically_increasing_id(), 16),
                ).alias(enc.ORDER)
            )
        df = comp.spark.read.text(list(info.paths)).select(*cols)
        obs = Observation()
        df = df.observe(obs, F.count(F.lit(1)).alias("rows"))
        comp.observations.append(("in", node.topic, obs))
    s = Stream(
        df,
        enc.NONE,
        enc.STR,
        ordered=ordered,
        aligned=True,
        source=info,
        number=number,
        nonnull=True,
    )
    return _decoded(comp, node, s)


def _decoded(comp: Compiler, node: n.SourceNode, s: Stream) -> Stream:
    """``s`` with the source's deserializer applied to its text values."""
    if not isinstance(node.value_serde, StrSerde):
        step = PyStep("decode", node.name, _Decode(node.value_serde))
        s = comp.add_step(s, step, nonnull=False)
    return s


def _redis_source(node: n.SourceNode, comp: Compiler, ordered: bool) -> Stream:
    """A Redis stream's entries (:mod:`.redisstreams`): the key field as a str key, the
    value field's text as the value, ordered by entry id."""
    from rstreams.runtime.spark.redisstreams import read_stream

    info = comp.sources[node.topic]
    assert info.redis is not None
    target, spec = info.redis
    if spec.key is not None and not isinstance(node.key_serde, StrSerde):
        raise UnsupportedOperation(
            f"source {node.topic!r}: the Spark backend reads a RedisStream's key field as "
            f"text; drop key_deserializer=, or map the key in a keyBy step"
        )
    df = read_stream(comp.spark, target, spec, node.topic, comp.streaming)
    cols = [F.col("v").alias("v_s")] + ([F.col("k").alias("k_s")] if spec.key else [])
    if ordered:
        cols.append(
            F.concat(
                F.lit(info.index.to_bytes(2, "big")), _be(F.col("ms"), 16), _be(F.col("seq"), 16)
            ).alias(enc.ORDER)
        )
    df = df.select(*cols)
    if not comp.streaming:
        obs = Observation()
        df = df.observe(obs, F.count(F.lit(1)).alias("rows"))
        comp.observations.append(("in", node.topic, obs))
    key = enc.STR if spec.key else enc.NONE
    s = Stream(df, key, enc.STR, ordered=ordered)
    return _decoded(comp, node, s)


def _builtin(fn: Any) -> bool:
    return isinstance(fn, Builtin)


def map_values(comp: Compiler, s: Stream, node: n.Node, fn: Any, kind: str) -> Stream:
    """``s`` with ``fn`` applied to every value: nothing to do for the identity (or no
    ``fn``), a native expression for a built-in that has one, else a pending Python step
    of ``kind`` ("map", or "partial" for sum/min/max's function)."""
    if fn is None or is_identity(fn):
        return s
    if _builtin(fn):
        native = translate_map(fn, comp.field(s), comp.cal_for(fn))
        if native is not None:
            return comp.with_value(s, node, native, fn)
    return comp.add_step(s, PyStep(kind, node.name, fn, fn), nonnull=False)


def _map(node: n.MapNode, comp: Compiler, ordered: bool) -> Stream:
    return map_values(comp, comp.get(node.parents[0], ordered), node, node.fn, "map")


def _flat_map(node: n.FlatMapNode, comp: Compiler, ordered: bool) -> Stream:
    s = comp.get(node.parents[0], ordered)
    if _builtin(node.fn):
        native = translate_flat(node.fn, comp.field(s), comp.cal_for(node.fn))
        if native is not None:
            s = comp.flush(s)
            df = comp.guard(s, node, native, node.fn)
            kc = [F.col(c) for c in enc.columns("k", s.key)]
            arr = native.cols["a"]
            if ordered:
                df = df.select(*kc, F.col(enc.ORDER), F.posexplode(arr).alias("_p", "v_s"))
                order = F.concat(F.col(enc.ORDER), _be(F.col("_p"), 8)).alias(enc.ORDER)
                df = df.select(*kc, "v_s", order)
            else:
                df = df.select(*kc, F.explode(arr).alias("v_s"))
            return attrs.evolve(s, df=df, value=enc.STR, nonnull=True, aligned=False, unique=False)
    step = PyStep("flatMap", node.name, node.fn, node.fn)
    return comp.add_step(s, step, nonnull=False, aligned=False, unique=False)


def _filter(node: n.FilterNode, comp: Compiler, ordered: bool) -> Stream:
    s = comp.get(node.parents[0], ordered)
    if _builtin(node.fn):
        native = translate_map(node.fn, comp.field(s), comp.cal_for(node.fn))
        cond = truthy(native) if native is not None else None
        if native is not None and cond is not None:
            s = comp.flush(s)
            df = comp.guard(s, node, native, node.fn).where(cond)
            return attrs.evolve(s, df=df, aligned=False)
    return comp.add_step(s, PyStep("filter", node.name, node.fn, node.fn))


def _key_by(node: n.KeyByNode, comp: Compiler, ordered: bool) -> Stream:
    s = comp.get(node.parents[0], ordered)
    if is_identity(node.fn):
        if s.pending or s.number is not None:
            return comp.add_step(s, PyStep("identityKey", node.name), unique=False)
        same = Native(s.value, dict(field_of(s.value).cols))
        return attrs.evolve(comp.with_key(s, node, same, node.fn), unique=False)
    if _builtin(node.fn):
        native = translate_map(node.fn, comp.field(s), comp.cal_for(node.fn))
        if native is not None:
            return attrs.evolve(comp.with_key(s, node, native, node.fn), unique=False)
    return comp.add_step(s, PyStep("keyBy", node.name, node.fn, node.fn), unique=False)


def _python_only(node: n.FnNode, comp: Compiler, ordered: bool) -> Stream:
    s = comp.get(node.parents[0], ordered)
    return comp.add_step(s, PyStep(node.kind, node.name, node.fn, node.fn))


def _pass_through(node: n.Node, comp: Compiler, ordered: bool) -> Stream:
    return comp.get(node.parents[0], ordered)


def _merge(node: n.MergeNode, comp: Compiler, ordered: bool) -> Stream:
    parts = [comp.flush(comp.get(p, ordered)) for p in node.parents]
    key = enc.join_kinds([p.key for p in parts])
    value = enc.join_kinds([p.value for p in parts])
    parts = [comp.widen(p, key, value) for p in parts]
    df = parts[0].df
    for p in parts[1:]:
        df = df.unionByName(p.df)
    return Stream(
        df,
        key,
        value,
        ordered=ordered,
        python=any(p.python for p in parts),
        after_agg=any(p.after_agg for p in parts),
    )


#: This module's translation rules (sources, record steps, merge and sinks), by node type;
#: registered with ``translate`` by :func:`rstreams.runtime.spark.rules.register_rules`,
#: not on import.
RULES: dict[type[n.Node], Rule] = {
    n.SourceNode: _source,
    n.MapNode: _map,
    n.FlatMapNode: _flat_map,
    n.FilterNode: _filter,
    n.KeyByNode: _key_by,
    n.SelectTimestampNode: _python_only,
    n.PeekNode: _python_only,
    n.ForeachNode: _python_only,
    n.PrintNode: _pass_through,
    n.ToRStreamNode: _pass_through,
    n.SinkNode: _pass_through,
    n.MergeNode: _merge,
}
