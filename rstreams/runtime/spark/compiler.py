"""Logical graph -> PySpark DataFrames: the Spark backend's compiler.

It compiles :mod:`rstreams.dsl.nodes` directly (not the embedded engine's processors),
one translation function per node type (``translate``, a ``functools.singledispatch``)
and a loud fallback naming the step. Each rule returns a :class:`Stream`: a DataFrame
plus what is known about it (field layouts, see :mod:`.encoding`; whether it carries the
ordering key; Python steps not applied yet). ``Stream`` and ``translate`` are defined in
:mod:`.compiled`, the rules in :mod:`.steps` (sources, record steps, merge, sinks),
:mod:`.aggregates` (keyed aggregations) and :mod:`.windows` (windows and joins),
registered by :func:`.rules.register_rules` (a Compiler refuses to start before); this
module is the :class:`Compiler` that drives them (memoization, fusing, native guards).

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
from collections.abc import Callable
from typing import Any

import attrs
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.functions import Builtin
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.compiled import (
    NULL_PACKED,
    SourceInfo,
    Stream,
    Terminal,
    check_rules,
    field_of,
    is_identity,
    last_per_key,
    null_key,
    translate,
)
from rstreams.runtime.spark.native import Calibration, Field, Native
from rstreams.runtime.spark.segments import (
    FAILURE_MARK,
    ErrorPolicy,
    Fold,
    PyStep,
    Segment,
    fn_label,
)
from rstreams.runtime.spark.support import check_supported

__all__ = [
    "MAX_NATIVE_DEAD_LETTERS",
    "NULL_PACKED",
    "STREAM_METRIC_PREFIX",
    "Compiler",
    "SourceInfo",
    "Stream",
    "Terminal",
    "field_of",
    "is_identity",
    "last_per_key",
    "null_key",
    "translate",
]

#: Name prefix of the streaming observations counting native-step failures.
STREAM_METRIC_PREFIX = "rstreams-failed-"
#: Failures a native step keeps for dead letters per run (the count is exact).
MAX_NATIVE_DEAD_LETTERS = 10_000


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
        check_rules()
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
