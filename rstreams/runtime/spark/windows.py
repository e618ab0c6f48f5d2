"""Windowed aggregations and stream-stream joins on Spark (batch mode).

Event time: the compiled streams of this backend carry no timestamps, so a window or
join recompiles its input *timed*: from the ``selectTimestamp`` step down to the window
or join, every Python step runs on ``(ts, value)`` pairs (the same functions, wrapped;
names and error reporting unchanged), then one ``mapInArrow`` splits the pairs into a
native ``_t`` column (epoch ms) and the value. Between ``selectTimestamp`` and the
window or join only map, flatMap, filter, keyBy and peek may appear.

- Tumbling/hopping windows: ``F.window`` over ``timestamp_millis(_t)``; sessions:
  ``F.session_window`` with a gap of ``gap + 1`` ms (Spark merges records strictly less
  than the gap apart, the embedded engine at most ``gap`` apart) and ``end`` = the last
  record's timestamp. count natively; sum/min/max natively over int values.
- Joins: an equi-join on the packed join key plus the JoinWindow time range (both
  bounds inclusive), ``inner``/``left``/``full``; the joiner runs in Python.

Batch mode sees the whole input at once: there is no stream time, so nothing is late
(``.late()`` is empty) and every window is final. On Structured Streaming, windows,
``.late()`` and joins replay the embedded engine per queue instead (:mod:`.stateful`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.dsl.windows import HoppingWindow, SessionWindow, TumblingWindow
from rstreams.errors import UnsupportedOperation
from rstreams.runtime.engine.record import as_timestamp
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark import stateful
from rstreams.runtime.spark.compiler import Compiler, Stream, translate
from rstreams.runtime.spark.segments import ErrorPolicy, PyStep
from rstreams.windowed import Windowed

_TIME = "_t"
#: Ordering-key prefix of results emitted at the end of input (after every record).
_AT_END = b"\xff\xff"


# -- steps over (ts, value) pairs -----------------------------------------------------------


@attrs.frozen
class _Stamp:
    """selectTimestamp: ``v -> (fn(v), v)``."""

    fn: Any

    def __call__(self, value: Any) -> tuple[int, Any]:
        return (as_timestamp(self.fn(value)), value)


@attrs.frozen
class _OnValue:
    """map: ``(t, v) -> (t, fn(v))``."""

    fn: Any

    def __call__(self, tv: tuple[int, Any]) -> tuple[int, Any]:
        return (tv[0], self.fn(tv[1]))


@attrs.frozen
class _Of:
    """filter/keyBy/peek: ``fn(v)``."""

    fn: Any

    def __call__(self, tv: tuple[int, Any]) -> Any:
        return self.fn(tv[1])


@attrs.frozen
class _Flat:
    """flatMap: ``(t, v) -> [(t, x) for x in fn(v)]``."""

    fn: Any

    def __call__(self, tv: tuple[int, Any]) -> list[tuple[int, Any]]:
        t = tv[0]
        return [(t, x) for x in self.fn(tv[1])]


_WRAP = {"map": _OnValue, "flatMap": _Flat, "filter": _Of, "keyBy": _Of, "peek": _Of}
_TIMED_KINDS = (n.MapNode, n.FlatMapNode, n.FilterNode, n.KeyByNode, n.PeekNode)


def _no_time(target: n.Node, at: n.Node) -> UnsupportedOperation:
    return UnsupportedOperation(
        f"step {target.name!r} ({target.kind}) needs event time on backend 'spark': put "
        "selectTimestamp(fn) upstream of it, with only map/flatMap/filter/keyBy/peek in "
        f"between (found step {at.name!r} ({at.kind}); the Spark backend has no ingestion "
        "timestamps)"
    )


def _timed(comp: Compiler, node: n.Node, target: n.Node, ordered: bool) -> Stream:
    """``node``'s stream with (ts, value) pairs as values (Python steps pending)."""
    if isinstance(node, n.SelectTimestampNode):
        s = comp.get(node.parents[0], ordered)
        step = PyStep("map", node.name, _Stamp(node.fn), node.fn)
        return comp.add_step(s, step, nonnull=False, unique=False)
    if isinstance(node, _TIMED_KINDS):
        s = _timed(comp, node.parents[0], target, ordered)
        step = PyStep(node.kind, node.name, _WRAP[node.kind](node.fn), node.fn)
        aligned = s.aligned and node.kind in ("map", "keyBy", "peek")
        return comp.add_step(s, step, nonnull=False, unique=False, aligned=aligned)
    raise _no_time(target, node)


@attrs.frozen
class _Untime:
    """mapInArrow: packed (ts, value) pairs -> ``_t`` and the value in layout ``kind``
    (optionally ``fn(value)``: the partial of sum/min/max); keys and ``_o`` pass."""

    key_kind: str
    kind: str
    ordered: bool
    policy: ErrorPolicy
    name: str = ""
    partial: Any = None

    def schema(self) -> str:
        parts = [*enc.ddl("k", self.key_kind), f"{_TIME} bigint", *enc.ddl("v", self.kind)]
        if self.ordered:
            parts.append(f"{enc.ORDER} binary")
        return ", ".join(parts)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        kcols = enc.columns("k", self.key_kind)
        for rb in batches:
            names = rb.schema.names
            pairs = enc.decode([rb.column(names.index("v_m"))], enc.PACKED, rb.num_rows)
            values = [p[1] for p in pairs]
            if self.partial is not None:
                keep: list[int] = []
                done: list[Any] = []
                for i, v in enumerate(values):
                    try:
                        done.append(self.partial(v))
                    except Exception as e:
                        self.policy.failed(self.name, e, key=None, value=v, fn=self.partial)
                        continue
                    keep.append(i)
                if len(keep) != len(values):
                    rb = rb.take(pa.array(keep, pa.int64()))
                    pairs = [pairs[i] for i in keep]
                values = done
            arrays = [rb.column(names.index(c)) for c in kcols]
            arrays.append(pa.array([p[0] for p in pairs], pa.int64()))
            arrays += enc.encode(values, self.kind)
            if self.ordered:
                arrays.append(rb.column(names.index(enc.ORDER)))
            fields = [
                *enc.arrow_fields("k", self.key_kind),
                pa.field(_TIME, pa.int64()),
                *enc.arrow_fields("v", self.kind),
            ]
            if self.ordered:
                fields.append(pa.field(enc.ORDER, pa.binary()))
            yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def timed_frame(
    comp: Compiler,
    node: n.Node,
    target: n.Node,
    ordered: bool,
    value_kind: str,
    key_fn: Any = None,
    partial: Any = None,
) -> Stream:
    """``node``'s records as a DataFrame of packed keys ``k_m``, ``_t`` and the value in
    ``value_kind`` (keyed by ``key_fn(value)`` if given: a join side; ``partial(value)``
    if given: the function of sum/min/max)."""
    s = _timed(comp, node, target, ordered)
    if key_fn is not None:
        s = comp.add_step(s, PyStep("keyBy", target.name, _Of(key_fn), key_fn))
    s = comp.flush(s, as_key=enc.PACKED, as_value=enc.PACKED, encode_step=target.name)
    u = _Untime(enc.PACKED, value_kind, ordered, comp.policy(s), target.name, partial)
    df = s.df.mapInArrow(u, u.schema())
    return attrs.evolve(s, df=df, value=value_kind, aligned=False)


# -- windowed aggregations ------------------------------------------------------------------


@attrs.frozen
class _MakeWindowed:
    """mapInArrow: packed key + ``_ws``/``_we`` -> packed ``Windowed(key, start, end)``."""

    value_kind: str
    ordered: bool

    def schema(self) -> str:
        parts = [*enc.ddl("k", enc.PACKED), *enc.ddl("v", self.value_kind)]
        if self.ordered:
            parts.append(f"{enc.ORDER} binary")
        return ", ".join(parts)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        vcols = enc.columns("v", self.value_kind)
        for rb in batches:
            names = rb.schema.names
            keys = enc.decode([rb.column(names.index("k_m"))], enc.PACKED, rb.num_rows)
            starts = rb.column(names.index("_ws")).to_pylist()
            ends = rb.column(names.index("_we")).to_pylist()
            windowed = [Windowed(k, s, e) for k, s, e in zip(keys, starts, ends)]
            arrays = enc.encode(windowed, enc.PACKED)
            arrays += [rb.column(names.index(c)) for c in vcols]
            fields = [*enc.arrow_fields("k", enc.PACKED), *enc.arrow_fields("v", self.value_kind)]
            if self.ordered:
                arrays.append(rb.column(names.index(enc.ORDER)))
                fields.append(pa.field(enc.ORDER, pa.binary()))
            yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _ms(value: int) -> str:
    return f"{value} milliseconds"


@translate.register
def _window_aggregate(node: n.WindowAggregateNode, comp: Compiler, ordered: bool) -> Stream:
    if comp.streaming:
        return stateful.window_aggregate(node, comp)
    if node.op not in ("count", "sum", "min", "max"):
        raise UnsupportedOperation(
            f"step {node.name!r} (window {node.op}) is not supported on backend 'spark': "
            "windowed count, sum, min and max are (sum/min/max over int values)"
        )
    count = node.op == "count"
    kind = enc.NONE if count else enc.ANY
    fn = None if count else node.fn
    s = timed_frame(comp, node.parents[0], node, ordered, kind, partial=fn)
    spec = node.window
    if comp.streaming and isinstance(spec, SessionWindow):
        raise UnsupportedOperation(
            f"step {node.name!r} (session window {node.op}) is not supported by Spark "
            "Structured Streaming here: Spark emits session windows in append mode only, "
            "after the watermark passes them, so the last sessions of a bounded run would "
            "never come out; run it in batch mode"
        )
    df = s.df
    ts = F.timestamp_millis(F.col(_TIME))
    if comp.streaming:
        # Structured Streaming: the watermark trails the largest event time by grace;
        # Spark drops records behind it and may expire the state of windows it passed.
        df = df.withColumn("_ts", ts).withWatermark("_ts", _ms(spec.grace))
        ts = F.col("_ts")
    if isinstance(spec, SessionWindow):
        group = F.session_window(ts, _ms(spec.gap + 1)).alias("_w")
        bounds = [F.min(_TIME).alias("_ws"), F.max(_TIME).alias("_we")]
    elif isinstance(spec, (TumblingWindow, HoppingWindow)):
        group = F.window(ts, _ms(spec.size), _ms(spec.advance)).alias("_w")
        bounds = []
    else:  # pragma: no cover - the DSL allows only these
        raise UnsupportedOperation(f"step {node.name!r}: window {spec!r} is not supported")
    if count:
        value = F.count(F.lit(1))
    else:
        # Python's exact result only for ints: anything else stops the job, loudly.
        message = F.lit(
            f"step {node.name!r} (window {node.op}) on backend 'spark' supports int values "
            "only; got a value of another type"
        )
        df = df.where(F.when(F.col("v_l").isNull(), F.raise_error(message)).otherwise(F.lit(True)))
        agg = {"sum": F.sum, "min": F.min, "max": F.max}[node.op]
        value = agg(F.col("v_l"))
    aggs: list[Column] = [*bounds, value.alias("v_l")]
    if ordered:
        aggs.append(F.max(enc.ORDER).alias(enc.ORDER))
    out = df.groupBy("k_m", group).agg(*aggs)
    if not bounds:
        out = out.select(
            "*",
            F.unix_millis(F.col("_w.start")).alias("_ws"),
            F.unix_millis(F.col("_w.end")).alias("_we"),
        ).where(F.col("_ws") >= 0)  # hopping windows start at multiples of advance >= 0
    cols = ["k_m", "_ws", "_we", "v_l"] + ([enc.ORDER] if ordered else [])
    mk = _MakeWindowed(enc.LONG, ordered)
    result = out.select(*cols).mapInArrow(mk, mk.schema())
    return Stream(
        result,
        enc.PACKED,
        enc.LONG,
        ordered=ordered,
        unique=True,
        after_agg=True,
        python=True,
        nonnull=True,
    )


@translate.register
def _late(node: n.LateNode, comp: Compiler, ordered: bool) -> Stream:
    """Batch mode has no stream time: no record is late (an empty stream of the window's
    input records)."""
    if comp.streaming:
        return stateful.late(node, comp)
    window = node.parents[0]
    s = comp.flush(comp.get(window.parents[0], ordered))
    return attrs.evolve(s, df=s.df.where(F.lit(False)), unique=False, aligned=False)


# -- joins ------------------------------------------------------------------------------------


@attrs.frozen
class _Join:
    """mapInArrow: joined rows (key ``k_m``, packed ``lv``/``rv``, null = missing side)
    -> ``joiner(left, right)`` in layout ANY."""

    joiner: Any
    name: str
    policy: ErrorPolicy

    def schema(self) -> str:
        return ", ".join([*enc.ddl("k", enc.PACKED), *enc.ddl("v", enc.ANY), f"{enc.ORDER} binary"])

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        unpack = enc._unpack
        for rb in batches:
            names = rb.schema.names
            keys = rb.column(names.index("k_m"))
            lv = rb.column(names.index("lv")).to_pylist()
            rv = rb.column(names.index("rv")).to_pylist()
            order = rb.column(names.index(enc.ORDER))
            keep: list[int] = []
            values: list[Any] = []
            for i, (lb, rbytes) in enumerate(zip(lv, rv)):
                left = None if lb is None else unpack(lb)
                right = None if rbytes is None else unpack(rbytes)
                try:
                    values.append(self.joiner(left, right))
                except Exception as e:
                    self.policy.failed(self.name, e, key=None, value=(left, right), fn=self.joiner)
                    continue
                keep.append(i)
            idx = pa.array(keep, pa.int64())
            arrays = [keys.take(idx), *enc.encode(values, enc.ANY), order.take(idx)]
            fields = [
                *enc.arrow_fields("k", enc.PACKED),
                *enc.arrow_fields("v", enc.ANY),
                pa.field(enc.ORDER, pa.binary()),
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


@translate.register
def _join(node: n.JoinNode, comp: Compiler, ordered: bool) -> Stream:
    if comp.streaming:
        return stateful.join(node, comp)
    w = node.window
    if w is None:
        raise UnsupportedOperation(
            f"step {node.name!r} (join without window) is not supported on backend 'spark': "
            "give the join a JoinWindow (.window(JoinWindow(...)))"
        )
    how = {"inner": "inner", "left": "left", "outer": "full"}.get(node.join_type)
    if how is None:
        raise UnsupportedOperation(
            f"step {node.name!r} ({node.join_type} join) is not supported on backend 'spark'"
        )
    left_node, right_node = node.parents
    ls = timed_frame(comp, left_node, node, True, enc.PACKED, node.left_key)
    rs = timed_frame(comp, right_node, node, True, enc.PACKED, node.right_key)
    left = ls.df.select(
        F.col("k_m").alias("lk"),
        F.col(_TIME).alias("lt"),
        F.col("v_m").alias("lv"),
        F.col(enc.ORDER).alias("lo"),
    )
    right = rs.df.select(
        F.col("k_m").alias("rk"),
        F.col(_TIME).alias("rt"),
        F.col("v_m").alias("rv"),
        F.col(enc.ORDER).alias("ro"),
    )
    # A left record at lt joins right records in [lt - before, lt + after].
    cond = (
        (F.col("lk") == F.col("rk"))
        & (F.col("rt") >= F.col("lt") - F.lit(w.before))
        & (F.col("rt") <= F.col("lt") + F.lit(w.after))
    )
    joined = left.join(right, cond, how)
    # A match comes out when its later record arrives; an unmatched record at the end.
    order = (
        F.when(F.col("lo").isNull(), F.concat(F.lit(_AT_END), F.col("ro")))
        .when(F.col("ro").isNull(), F.concat(F.lit(_AT_END), F.col("lo")))
        .otherwise(F.greatest(F.col("lo"), F.col("ro")))
    )
    df = joined.select(
        F.coalesce(F.col("lk"), F.col("rk")).alias("k_m"),
        F.col("lv"),
        F.col("rv"),
        order.alias(enc.ORDER),
    )
    j = _Join(node.joiner, node.name, comp.policy(ls))
    out = df.mapInArrow(j, j.schema())
    return Stream(out, enc.PACKED, enc.ANY, ordered=True, python=True)
