"""Logical graph -> PySpark DataFrames: the Spark backend's compiler.

It compiles :mod:`rstreams.dsl.nodes` directly (not the embedded engine's processors),
one translation function per node type (``functools.singledispatch``) and a loud
fallback naming the step. Each rule returns a :class:`Stream`: a DataFrame plus what is
known about it (field layouts, see :mod:`.encoding`; whether it carries the ordering
key; Python steps not applied yet).

Python steps are *fused*: consecutive user functions accumulate in
``Stream.pending`` and become one ``mapInArrow`` when something native (a built-in, a
shuffle, a sink) needs the columns. Built-ins with a native form (:mod:`.native`) compile
to Spark SQL expressions; ``keyBy`` + count/sum/min/max compile to ``groupBy().agg()``
with Spark's own aggregates; reduce/aggregate fold the records of each key in source
order in Python (sorted Arrow batches in batch mode, ``applyInPandasWithState`` with the
RocksDB state store in streaming mode).

The ordering key ``_o`` is only computed where something needs source order (a fold, a
sink's "last value per key" over non-aggregated records, print), so the common word
count plans carry no extra column.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import attrs
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.errors import UnsupportedOperation
from rstreams.functions import Builtin, Identity
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.native import (
    Calibration,
    Field,
    Native,
    translate_flat,
    translate_map,
    truthy,
)
from rstreams.runtime.spark.segments import (
    FAILURE_MARK,
    ErrorPolicy,
    Fold,
    PyStep,
    Segment,
    StreamFold,
    fn_label,
)
from rstreams.runtime.spark.support import BACKEND, check_supported
from rstreams.semantics.aggregations import Aggregation
from rstreams.serde import Serde, StrSerde

#: Name prefix of the streaming observations counting native-step failures.
STREAM_METRIC_PREFIX = "rstreams-failed-"
#: Failures a native step keeps for dead letters per run (the count is exact).
MAX_NATIVE_DEAD_LETTERS = 10_000


@attrs.frozen
class SourceInfo:
    """A source topic bound to input: index (in the pipeline), topic, paths."""

    index: int
    topic: str
    paths: tuple[str, ...]


@attrs.frozen
class Stream:
    """A compiled stream: a DataFrame and what the compiler knows about it."""

    df: DataFrame
    key: str
    value: str
    #: The DataFrame carries ``_o`` (or will, once ``number`` rows are numbered).
    ordered: bool = False
    #: Python steps not applied to ``df`` yet (fused into one mapInArrow later).
    pending: tuple[PyStep, ...] = ()
    #: ``df`` rows are the source scan's rows, 1:1 and in order (error locations).
    aligned: bool = False
    source: SourceInfo | None = None
    #: At most one row per key (an aggregation's table).
    unique: bool = False
    after_agg: bool = False
    #: Some Python runs in the lineage (recomputing it is not free).
    python: bool = False
    #: Streaming: number the rows of source ``number`` in the next segment.
    number: int | None = None
    #: The value's str column is never null.
    nonnull: bool = False

    def kinds_after_pending(self) -> tuple[str, str]:
        key, value = self.key, self.value
        for step in self.pending:
            if step.kind in ("map", "flatMap", "decode", "partial"):
                value = enc.ANY
            elif step.kind == "keyBy":
                key = enc.MIXED
            elif step.kind == "identityKey":
                key = enc.MIXED if value == enc.ANY else value
        return key, value


@attrs.frozen
class Terminal:
    """What the runner has to run for a terminal step."""

    node: n.Node
    stream: Stream


def is_identity(fn: Any) -> bool:
    """``F.identity()`` or a plain ``lambda x: x`` (same bytecode as the reference)."""
    if isinstance(fn, Identity):
        return True
    code = getattr(fn, "__code__", None)
    if not isinstance(fn, types.FunctionType) or code is None:
        return False
    ref = _identity_ref.__code__
    return (
        code.co_code == ref.co_code
        and code.co_argcount == 1
        and code.co_kwonlyargcount == 0
        and not code.co_flags & 0x0C  # *args / **kwargs
        and not fn.__defaults__
    )


def _identity_ref(x: Any) -> Any:  # the reference bytecode for is_identity
    return x


@attrs.frozen
class _Decode:
    """Source deserializer over the text of a line (Spark reads lines as str)."""

    serde: Serde

    def __call__(self, line: str) -> Any:
        return self.serde.deserialize(line.encode("utf-8"))


def _be(col: Column, digits: int) -> Column:
    """Fixed-width big-endian bytes of a non-negative integer column."""
    return F.unhex(F.lpad(F.hex(col), digits, "0"))


def _repr_col(field: Field) -> Column:
    """An approximation of ``repr(value)`` for native error messages."""
    parts = []
    c = field.cols
    if "s" in c:
        parts.append(F.concat(F.lit("'"), c["s"], F.lit("'")))
    if "l" in c:
        parts.append(c["l"].cast("string"))
    if "d" in c:
        parts.append(c["d"].cast("string"))
    if "b" in c:
        parts.append(F.concat(F.lit("<msgpack "), F.hex(c["b"]), F.lit(">")))
    return F.coalesce(*parts, F.lit("None"))


#: A None key in layout ``packed`` (msgpack's nil).
NULL_PACKED = enc._pack(None)


def null_key(kind: str) -> Column:
    """The condition "the key is None" on a flushed stream whose key is in layout
    ``kind`` (columns ``k_*``; see :mod:`.encoding`)."""
    if kind == enc.NONE:
        return F.lit(True)
    if kind == enc.PACKED:
        return F.col("k_m").isNull() | (F.col("k_m") == F.lit(NULL_PACKED))
    nulls = [F.col(c).isNull() for c in enc.columns("k", kind)]
    return functools.reduce(lambda a, b: a & b, nulls)


def field_of(kind: str, prefix: str = "v", nonnull: bool = False) -> Field:
    suffixes = [c.split("_", 1)[1] for c in enc.columns(prefix, kind)]
    return Field(kind, {s: F.col(f"{prefix}_{s}") for s in suffixes}, nonnull)


@functools.singledispatch
def translate(node: n.Node, comp: Compiler, ordered: bool) -> Stream:
    raise UnsupportedOperation(
        f"no translation rule for {type(node).__name__} (step {node.name!r}) on backend {BACKEND!r}"
    )


# (never read: translations of anything but a built-in return before looking at it)
_NO_CALIBRATION = Calibration((), (), (), (), (), (), ())


class Compiler:
    """Compiles one pipeline for one run; memoizes per (node, ordered)."""

    def __init__(
        self,
        spark: SparkSession,
        pipeline: n.Pipeline,
        sources: dict[str, SourceInfo],
        *,
        streaming: bool,
        on_error: str,
        calibration: Calibration | Callable[[], Calibration],
        accumulator: Any = None,
    ) -> None:
        self.spark = spark
        self.pipeline = pipeline
        self.sources = sources
        self.streaming = streaming
        self.on_error = on_error
        self._calibration = calibration
        self.accumulator = accumulator
        self.memo: dict[tuple[int, bool], Stream] = {}
        self.persisted: list[DataFrame] = []
        #: (what, name, Observation): source row counts and native-step failures.
        self.observations: list[tuple[str, str, Observation]] = []
        #: Streaming: the end-of-input marker directory (set by run_streaming; see
        #: :mod:`.stateful`).
        self.markers: str | None = None
        for node in pipeline.nodes:
            check_supported(node, streaming)
        self.unique, self.need_order = self._analyse()

    # -- analysis ---------------------------------------------------------------------

    def _analyse(self) -> tuple[dict[int, bool], dict[int, bool]]:
        unique: dict[int, bool] = {}
        keeps = (n.MapNode, n.FilterNode, n.PeekNode, n.SelectTimestampNode, n.ToRStreamNode)
        for node in self.pipeline.nodes:
            if isinstance(node, n.AggregateNode):
                unique[node.id] = True
            elif isinstance(node, keeps):
                unique[node.id] = unique[node.parents[0].id]
            else:
                unique[node.id] = False
        need: dict[int, bool] = {}
        for node in reversed(self.pipeline.nodes):
            need[node.id] = any(
                self._demands(child, node, unique, need)
                for child in self.pipeline.children_of(node)
            )
        return unique, need

    @staticmethod
    def _demands(
        child: n.Node, parent: n.Node, unique: dict[int, bool], need: dict[int, bool]
    ) -> bool:
        """Does ``child`` need its input in source order?"""
        if isinstance(child, n.AggregateNode):
            return child.op in ("reduce", "aggregate") or need[child.id]
        if isinstance(child, n.SinkNode):
            return not unique[parent.id]
        if isinstance(child, n.PrintNode):
            return True
        if isinstance(child, n.ForeachNode):
            return False
        return need[child.id]

    # -- compiling ----------------------------------------------------------------------

    def terminals(self) -> list[Terminal]:
        """Compile every terminal step (sinks, foreach, print, and peeks at a leaf)."""
        out = []
        for node in self.pipeline.nodes:
            leaf_peek = isinstance(node, n.PeekNode) and not self.pipeline.children_of(node)
            if isinstance(node, (n.SinkNode, n.ForeachNode, n.PrintNode)) or leaf_peek:
                out.append(Terminal(node, self.get(node)))
        return out

    def get(self, node: n.Node, ordered: bool = False) -> Stream:
        """The compiled output of ``node``; with ``_o`` if ``ordered`` or if any consumer
        of ``node`` needs it (one compilation serves them all)."""
        ordered = ordered or self.need_order[node.id]
        memo_key = (node.id, ordered)
        s = self.memo.get(memo_key)
        if s is None:
            s = translate(node, self, ordered)
            fan_out = len(self.pipeline.children_of(node)) > 1
            if fan_out and not self.streaming and (s.python or s.pending or s.after_agg):
                # Several branches read this: compute it once (and run its side effects
                # once), not once per branch.
                s = self.flush(s)
                s = attrs.evolve(s, df=s.df.persist())
                self.persisted.append(s.df)
            self.memo[memo_key] = s
        return s

    def policy(self, s: Stream) -> ErrorPolicy:
        return ErrorPolicy(
            self.on_error, self.accumulator, s.source.topic if s.source is not None else None
        )

    def add_step(self, s: Stream, step: PyStep, **changes: Any) -> Stream:
        return attrs.evolve(s, pending=(*s.pending, step), python=True, **changes)

    def flush(
        self,
        s: Stream,
        *,
        key: bool = True,
        value: bool = True,
        as_key: str | None = None,
        as_value: str | None = None,
        encode_step: str = "",
    ) -> Stream:
        """Apply the pending Python steps (one mapInArrow); optionally re-layout or drop
        the key/value columns the consumer does not need."""
        out_key, out_value = s.kinds_after_pending()
        out_key = as_key or out_key
        out_value = as_value or out_value
        if not s.pending and s.number is None and (out_key, out_value) == (s.key, s.value):
            return s
        seg = Segment(
            steps=s.pending,
            in_key=s.key,
            in_value=s.value,
            out_key=out_key if key else None,
            out_value=out_value if value else None,
            policy=self.policy(s),
            order_in=s.ordered and s.number is None,
            order_out=s.ordered,
            number=s.number,
            aligned=s.aligned and self.on_error == "fail",
            encode_step=encode_step,
        )
        cols = enc.columns("k", s.key) + enc.columns("v", s.value)
        if s.number is not None:
            cols += ["_f", "_b"]
        elif s.ordered:
            cols.append(enc.ORDER)
        df = s.df.select(*cols).mapInArrow(seg, seg.schema())
        changed = any(st.kind in ("map", "flatMap", "decode", "partial") for st in s.pending)
        return attrs.evolve(
            s,
            df=df,
            key=out_key if key else enc.NONE,
            value=out_value if value else enc.NONE,
            pending=(),
            number=None,
            python=True,
            aligned=s.aligned and all(st.one_to_one for st in s.pending),
            nonnull=s.nonnull and not changed and out_value == s.value,
        )

    def without_null_keys(self, s: Stream) -> Stream:
        """``s`` (flushed, its key kept) less the records whose key is None: what an
        aggregation reads (see ``rstreams.semantics.nullkeys``)."""
        return attrs.evolve(s, df=s.df.where(~null_key(s.key)))

    @functools.cached_property
    def cal(self) -> Calibration:
        """The Unicode calibration (a Spark job, unless cached on disk), measured only
        when a built-in is compiled."""
        c = self._calibration
        return c if isinstance(c, Calibration) else c()

    def cal_for(self, fn: Any) -> Calibration:
        """The calibration a native translation of ``fn`` may use: only a built-in
        has one, and only a built-in pays for measuring it."""
        return self.cal if isinstance(fn, Builtin) else _NO_CALIBRATION

    def field(self, s: Stream) -> Field:
        """The value field as the next native step would see it (after flushing)."""
        _, value = s.kinds_after_pending()
        return field_of(value, nonnull=s.nonnull and not s.pending)

    def guard(self, s: Stream, step: n.Node, native: Native, fn: Any) -> DataFrame:
        """Apply ``on_error`` to the rows a native step fails on (``s`` is flushed)."""
        df = s.df
        if native.error is None:
            return df
        field = field_of(s.value, nonnull=s.nonnull)
        info: list[Column] = [
            F.lit(step.name).alias("step"),
            F.lit(s.source.topic if s.source else None).cast("string").alias("topic"),
            F.lit(fn_label(fn)).alias("fn"),
            native.message.alias("error") if native.message is not None else F.lit("error"),
            F.lit("None").alias("key"),
            _repr_col(field).alias("value"),
        ]
        if self.on_error == "fail":
            where: list[Column] = [F.spark_partition_id().alias("partition")]
            if s.aligned and not self.streaming:
                df = df.withColumn("_r", F.monotonically_increasing_id())
                where.append(F.col("_r").alias("mono"))
            if s.ordered:
                where.append(F.lower(F.hex(enc.ORDER)).alias("order"))
            payload = F.concat(F.lit(FAILURE_MARK), F.to_json(F.struct(*info, *where)))
            ok = F.when(native.error, F.raise_error(payload)).otherwise(F.lit(True))
            return df.where(ok).drop("_r")
        if self.streaming:
            # Counted per micro-batch in the query's progress (observedMetrics).
            name = f"{STREAM_METRIC_PREFIX}{step.name}"
            df = df.observe(name, F.sum(F.when(native.error, 1).otherwise(0)).alias("failed"))
            return df.where(~native.error)
        obs = Observation()
        df = df.observe(
            obs,
            F.sum(F.when(native.error, 1).otherwise(0)).alias("failed"),
            F.slice(
                F.collect_list(F.when(native.error, F.struct(*info))),
                1,
                MAX_NATIVE_DEAD_LETTERS,
            ).alias("rows"),
        )
        self.observations.append(("failed", step.name, obs))
        return df.where(~native.error)

    def with_value(self, s: Stream, step: n.Node, native: Native, fn: Any) -> Stream:
        s = self.flush(s)
        df = self.guard(s, step, native, fn)
        cols = [F.col(c) for c in enc.columns("k", s.key)]
        cols += [native.cols[c.split("_", 1)[1]].alias(c) for c in enc.columns("v", native.kind)]
        if s.ordered:
            cols.append(F.col(enc.ORDER))
        # Rows a native step fails on never get through guard(), so a str result is
        # never null.
        return attrs.evolve(
            s, df=df.select(*cols), value=native.kind, nonnull=native.kind == enc.STR
        )

    def with_key(self, s: Stream, step: n.Node, native: Native, fn: Any) -> Stream:
        s = self.flush(s)
        df = self.guard(s, step, native, fn)
        cols = [native.cols[c.split("_", 1)[1]].alias(c) for c in enc.columns("k", native.kind)]
        cols += [F.col(c) for c in enc.columns("v", s.value)]
        if s.ordered:
            cols.append(F.col(enc.ORDER))
        return attrs.evolve(s, df=df.select(*cols), key=native.kind)

    def widen(self, s: Stream, key: str, value: str) -> Stream:
        """Re-layout a flushed stream to (key, value) layouts (for unions)."""
        if (s.key, s.value) == (key, value):
            return s
        if not (enc.widens_natively(s.key, key) and enc.widens_natively(s.value, value)):
            return self.flush(s, as_key=key, as_value=value)
        cols: list[Column] = []
        for prefix, src, dst in (("k", s.key, key), ("v", s.value, value)):
            have = set(enc.columns(prefix, src))
            for name in enc.columns(prefix, dst):
                if name in have:
                    cols.append(F.col(name))
                else:
                    cols.append(F.lit(None).cast(enc.spark_type(name)).alias(name))
        if s.ordered:
            cols.append(F.col(enc.ORDER))
        return attrs.evolve(s, df=s.df.select(*cols), key=key, value=value, nonnull=False)

    def fold(
        self, s: Stream, node: n.AggregateNode | n.WindowAggregateNode, op: str, ordered: bool
    ) -> Stream:
        """Batch fold of each key's records in source order (``s`` is flushed, ordered;
        for windows the key is the packed ``Windowed``)."""
        f = Fold(op, node.name, s.key, s.value, self.policy(s), node.fn, node.initializer, ordered)
        return self.sorted_fold(s, f, ordered)

    def sorted_fold(self, s: Stream, folder: Any, ordered: bool) -> Stream:
        """``folder`` (a mapInArrow callable with ``schema()``) over each key's records,
        a key's records together and in source order; values come out in any layout."""
        kc = enc.columns("k", s.key)
        df = s.df.repartition(*kc) if kc else s.df.repartition(1)
        df = df.sortWithinPartitions(*kc, enc.ORDER)
        return Stream(
            df.mapInArrow(folder, folder.schema()),
            s.key,
            enc.ANY,
            ordered=ordered,
            unique=True,
            after_agg=True,
            python=True,
            source=s.source,
        )

    def final_table(self, s: Stream, sink: n.Node) -> tuple[DataFrame, str, str]:
        """(DataFrame of the last value per key with a ``_n`` record count, key layout,
        value layout) for a sink fed by ``s``."""
        s = self.flush(s, encode_step=sink.name)
        return last_per_key(s.df, s.key, s.value, s.unique), s.key, s.value


def last_per_key(df: DataFrame, key: str, value: str, unique: bool) -> DataFrame:
    """The final table: the last value per key by ``_o``, and records per key ``_n``."""
    kc = enc.columns("k", key)
    vc = enc.columns("v", value)
    if unique:
        return df.select(*kc, *vc, F.lit(1).cast("bigint").alias("_n"))
    aggs = [F.count(F.lit(1)).alias("_n")]
    if vc:
        aggs.append(F.max_by(F.struct(*vc), F.col(enc.ORDER)).alias("_v"))
    out = df.groupBy(*kc).agg(*aggs)
    if not kc:  # a global aggregation has a row even for no input
        out = out.where(F.col("_n") > 0)
    return out.select(*kc, *[F.col(f"_v.{c}").alias(c) for c in vc], "_n")


# -- translation rules ----------------------------------------------------------------------


@translate.register
def _source(node: n.SourceNode, comp: Compiler, ordered: bool) -> Stream:
    info = comp.sources[node.topic]
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
    if not isinstance(node.value_serde, StrSerde):
        step = PyStep("decode", node.name, _Decode(node.value_serde))
        s = comp.add_step(s, step, nonnull=False)
    return s


def _builtin(fn: Any) -> bool:
    return isinstance(fn, Builtin)


@translate.register
def _map(node: n.MapNode, comp: Compiler, ordered: bool) -> Stream:
    s = comp.get(node.parents[0], ordered)
    if is_identity(node.fn):
        return s
    if _builtin(node.fn):
        native = translate_map(node.fn, comp.field(s), comp.cal_for(node.fn))
        if native is not None:
            return comp.with_value(s, node, native, node.fn)
    return comp.add_step(s, PyStep("map", node.name, node.fn, node.fn), nonnull=False)


@translate.register
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


@translate.register
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


@translate.register
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


@translate.register(n.SelectTimestampNode)
@translate.register(n.PeekNode)
@translate.register(n.ForeachNode)
def _python_only(node: n.FnNode, comp: Compiler, ordered: bool) -> Stream:
    s = comp.get(node.parents[0], ordered)
    return comp.add_step(s, PyStep(node.kind, node.name, node.fn, node.fn))


@translate.register(n.PrintNode)
@translate.register(n.ToRStreamNode)
@translate.register(n.SinkNode)
def _pass_through(node: n.Node, comp: Compiler, ordered: bool) -> Stream:
    return comp.get(node.parents[0], ordered)


@translate.register
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


def _partial(comp: Compiler, s: Stream, node: n.AggregateNode) -> Stream:
    """Apply sum/min/max's function (the partial) before the shuffle."""
    fn = node.fn
    if fn is None or is_identity(fn):
        return s
    if _builtin(fn):
        native = translate_map(fn, comp.field(s), comp.cal_for(fn))
        if native is not None:
            return comp.with_value(s, node, native, fn)
    return comp.add_step(s, PyStep("partial", node.name, fn, fn), nonnull=False)


@translate.register
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
        return Stream(
            df, enc.PACKED, enc.PACKED, ordered=True, unique=True, after_agg=True, python=True
        )
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
    return Stream(
        df,
        s.key,
        enc.LONG,
        ordered=ordered,
        unique=True,
        after_agg=True,
        python=s.python,
        nonnull=True,
    )


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
        return Stream(
            _fail_inexact(node, table).drop("_x"),
            s.key,
            s.value,
            ordered=ordered,
            unique=True,
            after_agg=True,
            python=s.python,
        )
    table = table.persist()
    comp.persisted.append(table)
    good = Stream(
        table.where(~F.col("_x")).drop("_x"),
        s.key,
        s.value,
        ordered=ordered,
        unique=True,
        after_agg=True,
        python=s.python,
    )
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
