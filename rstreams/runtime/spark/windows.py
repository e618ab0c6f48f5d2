"""Windowed aggregations and stream-stream joins on Spark (batch mode).

Event time: the compiled streams of this backend carry no timestamps, so a window or
join recompiles its input *timed*: from the ``selectTimestamp`` step down to the window
or join, every Python step runs on ``(ts, value)`` pairs (the same functions, wrapped;
names and error reporting unchanged), then one ``mapInArrow`` splits the pairs into a
native ``_t`` column (epoch ms) and the value. Between ``selectTimestamp`` and the
window or join only map, flatMap, filter, keyBy and peek may appear.

- count/sum/min/max over tumbling/hopping windows: ``F.window`` over
  ``timestamp_millis(_t)``; over sessions (emit="close"): ``F.session_window`` with the
  gap (Spark merges records at most the gap apart, as the embedded engine does) and
  ``end`` = the last record's timestamp. count natively; sum/min/max over int values.
- reduce/aggregate over tumbling/hopping windows (batch): each record is keyed by the
  packed ``Windowed(key, start, end)`` of every window it belongs to, then folded in
  source order like a non-windowed reduce (``Compiler.fold``).
- Sessions in update mode (every op) and reduce/aggregate over sessions (batch): each
  key's records are replayed in source order by :class:`SessionFold` through the
  semantics core's sessions (the embedded engine's), which also gives the ``None`` of
  merged-away sessions.
- Windowed joins: an equi-join on the packed join key plus the JoinWindow time range
  (both bounds inclusive), ``inner``/``left``/``full``; the joiner runs in Python.
- Joins without window (batch): temporal joins, an as-of join: each record meets the
  other side's latest version of its key at or before its (event time, position), a
  running ``last(..., ignorenulls)`` per key in that order, valid for ``ttl``.

Batch mode sees the whole input at once: there is no stream time, so nothing is late
(``.late()`` is empty), every window is final, no session closes before the end of the
input and grace plays no part (a temporal join's ``ttl`` does: it is a rule on
timestamps). On Structured
Streaming, windows, ``.late()`` and joins replay the embedded engine per queue instead
(:mod:`.stateful`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa
from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.dsl.windows import HoppingWindow, SessionWindow, TumblingWindow
from rstreams.errors import UnsupportedOperation
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark import stateful
from rstreams.runtime.spark.compiled import Rule, table_stream
from rstreams.runtime.spark.compiler import NULL_PACKED, Compiler, Stream, null_key
from rstreams.runtime.spark.segments import _OUT_BATCH, ErrorPolicy
from rstreams.runtime.spark.timed import _TIME, join_side_frame, timed_frame
from rstreams.semantics.aggregations import Aggregation
from rstreams.semantics.timing import NO_TIME, DictState
from rstreams.semantics.windows import WindowCore
from rstreams.windowed import Windowed

#: Ordering-key prefix of results emitted at the end of input (after every record).
_AT_END = b"\xff\xff"


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


def _window_aggregate(node: n.WindowAggregateNode, comp: Compiler, ordered: bool) -> Stream:
    """Batch: count/sum/min/max natively (``F.window``; ``F.session_window`` for sessions
    in close mode), everything else, and sum/min/max over values that are not all ints,
    as exact folds (:func:`_window_fold`)."""
    if comp.streaming:
        return stateful.window_aggregate(node, comp)
    spec = node.window
    if node.op in ("reduce", "aggregate") or (
        isinstance(spec, SessionWindow) and node.emit == "update"
    ):
        return _window_fold(node, comp, ordered)
    count = node.op == "count"
    kind = enc.NONE if count else enc.ANY
    fn = None if count else node.fn
    s = timed_frame(comp, node.parents[0], node, ordered, kind, partial=fn)
    df = s.df
    ts = F.timestamp_millis(F.col(_TIME))
    if isinstance(spec, SessionWindow):
        group = F.session_window(ts, _ms(spec.gap)).alias("_w")
        bounds = [F.min(_TIME).alias("_ws"), F.max(_TIME).alias("_we")]
    elif isinstance(spec, (TumblingWindow, HoppingWindow)):
        group = F.window(ts, _ms(spec.size), _ms(spec.advance)).alias("_w")
        bounds = []
    else:  # pragma: no cover - the DSL allows only these
        raise UnsupportedOperation(f"step {node.name!r}: window {spec!r} is not supported")
    aggs: list[Column] = list(bounds)
    aggregation = Aggregation.of(node)
    if count:
        aggs.append(aggregation.spark(F, None).alias("v_l"))
    else:
        # Spark's result is Python's when every value of the window is an int (and a
        # sum does not overflow 64 bits); otherwise the exact fold does the whole step.
        value = aggregation.spark(F, F.col("v_l"))
        exact = aggregation.spark_exact(F, F.col("v_l"), "l", True)
        aggs += [value.alias("v_l"), exact.alias("_exact")]
    if ordered:
        aggs.append(F.max(enc.ORDER).alias(enc.ORDER))
    out = df.groupBy("k_m", group).agg(*aggs)
    if not count:
        out = out.persist()
        comp.persisted.append(out)
        if not out.where(~F.col("_exact")).isEmpty():
            return _window_fold(node, comp, ordered)
    if not bounds:
        out = out.select(
            "*",
            F.unix_millis(F.col("_w.start")).alias("_ws"),
            F.unix_millis(F.col("_w.end")).alias("_we"),
        )
        if isinstance(spec, HoppingWindow):  # they start at multiples of advance >= 0
            out = out.where(F.col("_ws") >= 0)
    cols = ["k_m", "_ws", "_we", "v_l"] + ([enc.ORDER] if ordered else [])
    mk = _MakeWindowed(enc.LONG, ordered)
    result = out.select(*cols).mapInArrow(mk, mk.schema())
    return table_stream(result, enc.PACKED, enc.LONG, ordered=ordered, python=True, nonnull=True)


def _window_fold(node: n.WindowAggregateNode, comp: Compiler, ordered: bool) -> Stream:
    """Batch: reduce/aggregate, sessions in update mode and sum/min/max over values
    that are not all ints, as exact folds of each key's records in source order: per
    window (tumbling/hopping), or a replay of the key's sessions (:class:`SessionFold`)."""
    partial = node.fn if node.op in ("sum", "min", "max") else None
    kind = enc.NONE if node.op == "count" else enc.PACKED
    spec = node.window
    if not isinstance(spec, SessionWindow):
        # One group per (key, window): the packed Windowed(key, start, end).
        s = timed_frame(comp, node.parents[0], node, True, kind, partial=partial, windows=spec)
        return comp.fold(s, node, node.op, ordered)
    s = timed_frame(comp, node.parents[0], node, True, kind, partial=partial)
    fold = SessionFold(
        node.op,
        node.name,
        spec.gap,
        node.emit == "close",
        kind,
        comp.policy(s),
        node.fn,
        node.initializer,
        node.merger,
        ordered,
    )
    return comp.sorted_fold(s, fold, ordered)


@attrs.frozen
class SessionFold:
    """Session windows of each key, replayed record by record in source order.

    The callable given to ``mapInArrow`` after ``repartition(k_m)`` and
    ``sortWithinPartitions(k_m, _o)``. Each key's records run through a
    :class:`~rstreams.semantics.windows.WindowCore` (the embedded engine's sessions)
    whose stream time never moves, as everywhere in batch mode: a record joins every
    session of its key it is at most ``gap`` from (merging them: ``merge(older,
    newer)`` in start order), nothing is late and no session closes before the end of
    input. Emits one row per ``Windowed(key, start, end)``: its last
    value and the ``_o`` of the record that emitted it. In update mode that includes the
    ``None`` of every session merged away, as in the embedded final table; in close mode
    only the final sessions.
    """

    op: str
    name: str
    gap: int
    emit_close: bool
    value_kind: str
    policy: ErrorPolicy
    fn: Any = None
    initializer: Any = None
    merger: Any = None
    order_out: bool = False

    def schema(self) -> str:
        parts = [*enc.ddl("k", enc.PACKED), *enc.ddl("v", enc.ANY)]
        if self.order_out:
            parts.append(f"{enc.ORDER} binary")
        return ", ".join(parts)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        agg = Aggregation.of_parts(self.op, self.fn, self.initializer, self.merger)
        window = SessionWindow(self.gap)
        out: list[tuple[Windowed, Any, bytes]] = []
        key: Any = None
        cur: bytes | None = None
        core: WindowCore | None = None
        # The key's results: (start, end) -> [last value, _o of the record emitting it].
        results: dict[tuple[int, int], list[Any]] = {}
        o: bytes = b""

        def emit(wk: Windowed, value: Any, ts: int, off: int) -> None:
            results[(wk.start, wk.end)] = [value, o]

        for rb in batches:
            names = rb.schema.names
            n_rows = rb.num_rows
            kms = rb.column(names.index("k_m")).to_pylist()
            times = rb.column(names.index(_TIME)).to_pylist()
            vcols = [rb.column(names.index(c)) for c in enc.columns("v", self.value_kind)]
            values = enc.decode(vcols, self.value_kind, n_rows)
            order = rb.column(names.index(enc.ORDER)).to_pylist()
            for km, ts, v, o in zip(kms, times, values, order):
                if km != cur:
                    out += self._results(key, core, results)
                    cur, key, results = km, enc._unpack(km), {}
                    # Updates always: close mode keeps just the final sessions at the end.
                    core = WindowCore(agg, window, "update", DictState(), emit,
                                      update=agg.fold_update)  # fmt: skip
                assert core is not None
                try:
                    core.record(key, v, ts, 0, NO_TIME)  # batch: no stream time
                except Exception as e:
                    self.policy.failed(self.name, e, key=key, value=v, fn=self.fn, order=o)
            if len(out) >= _OUT_BATCH:
                yield self._batch(out)
                out = []
        out += self._results(key, core, results)
        if out:
            yield self._batch(out)

    def _results(
        self, key: Any, core: WindowCore | None, results: dict[tuple[int, int], list[Any]]
    ) -> list[tuple[Windowed, Any, bytes]]:
        """A key's rows: every session's last value (update mode: the None of sessions
        merged away too; close mode: only the final sessions)."""
        if core is None:
            return []
        if self.emit_close:
            live = core.sessions.get(key, {}).items()
            return [(Windowed(key, s, e), *results[(s, e)]) for s, e in live]
        return [(Windowed(key, s, e), value, o) for (s, e), (value, o) in results.items()]

    def _batch(self, rows: list[tuple[Windowed, Any, bytes]]) -> pa.RecordBatch:
        values = [r[1] for r in rows]
        try:
            arrays = enc.encode([r[0] for r in rows], enc.PACKED) + enc.encode(values, enc.ANY)
        except enc.EncodeError as e:
            bad = rows[e.index]
            self.policy.failed(self.name, e, key=bad[0], value=bad[1], fn=self.fn)
            return self._batch(rows[: e.index] + rows[e.index + 1 :])
        fields = [*enc.arrow_fields("k", enc.PACKED), *enc.arrow_fields("v", enc.ANY)]
        if self.order_out:
            arrays.append(pa.array([r[2] for r in rows], pa.binary()))
            fields.append(pa.field(enc.ORDER, pa.binary()))
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


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


def _join(node: n.JoinNode, comp: Compiler, ordered: bool) -> Stream:
    if comp.streaming:
        return stateful.join(node, comp)
    w = node.window
    if w is None:
        return _temporal_join(node, comp)
    how = {"inner": "inner", "left": "left", "outer": "full"}.get(node.join_type)
    if how is None:
        raise UnsupportedOperation(
            f"step {node.name!r} ({node.join_type} join) is not supported on backend 'spark'"
        )
    left_node, right_node = node.parents
    ls = timed_frame(comp, left_node, node, True, enc.PACKED, node.left_key)
    rs = timed_frame(comp, right_node, node, True, enc.PACKED, node.right_key)
    # A None join key becomes SQL's NULL, which equals nothing: the join drops it (inner)
    # or keeps it unmatched (left/full), as rstreams.semantics.nullkeys says.
    join_key = F.when(~null_key(enc.PACKED), F.col("k_m"))
    left = ls.df.select(
        join_key.alias("lk"),
        F.col(_TIME).alias("lt"),
        F.col("v_m").alias("lv"),
        F.col(enc.ORDER).alias("lo"),
    )
    right = rs.df.select(
        join_key.alias("rk"),
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
    # A match comes out when its later record arrives; an unmatched record at the end,
    # but one with a None key at once.
    order = (
        F.when(F.col("lk").isNull() & F.col("rk").isNull(), F.coalesce("lo", "ro"))
        .when(F.col("lo").isNull(), F.concat(F.lit(_AT_END), F.col("ro")))
        .when(F.col("ro").isNull(), F.concat(F.lit(_AT_END), F.col("lo")))
        .otherwise(F.greatest(F.col("lo"), F.col("ro")))
    )
    df = joined.select(
        F.coalesce(F.col("lk"), F.col("rk"), F.lit(NULL_PACKED)).alias("k_m"),
        F.col("lv"),
        F.col("rv"),
        order.alias(enc.ORDER),
    )
    j = _Join(node.joiner, node.name, comp.policy(ls))
    out = df.mapInArrow(j, j.schema())
    return Stream(out, enc.PACKED, enc.ANY, ordered=True, python=True)


def _temporal_join(node: n.JoinNode, comp: Compiler) -> Stream:
    """A temporal join (no window), batch: an as-of join. Each record of an emitting
    side meets the other side's latest version of its key at or before its own (event
    time, ``_o``), if that version is at most ``ttl`` older
    (:mod:`rstreams.semantics.temporal`), natively: a running ``last(...,
    ignorenulls)`` of the other side's value and time over the key's records in
    (``_t``, ``_o``) order (the default RANGE frame, so records of equal time and
    position see each other, as the engine's ``<=``).

    Batch mode has no stream time: nothing is late and grace plays no part in what
    records meet (equal to the engine when grace covers the input's disorder). Results
    are ordered by (time, position, side), the order the engine answers them in; those
    of None keys, which the engine answers at once, keep the input's order.
    """
    frames = []
    for i, (parent, key_fn) in enumerate(
        ((node.parents[0], node.left_key), (node.parents[1], node.right_key))
    ):
        s = join_side_frame(comp, parent, node, key_fn)
        frames.append((s, s.df.select("k_m", _TIME, "v_m", enc.ORDER, F.lit(i).alias("_side"))))
    (ls, left), (_, right) = frames
    both = left.unionByName(right)
    emits = {0: "L" in node.emits, 1: "R" in node.emits}
    outer = {0: node.join_type in ("left", "outer"), 1: node.join_type == "outer"}
    side = F.col("_side")
    # A record with a None key meets nothing: unmatched on a left/outer side, else gone.
    alone = both.where(null_key(enc.PACKED)).where(
        F.when(side == 0, F.lit(emits[0] and outer[0])).otherwise(F.lit(emits[1] and outer[1]))
    )
    # The engine answers those at once, in input order, after what stream time (the
    # largest time so far) has released: after every record older than it - grace.
    # Here the largest time among these records stands in for stream time (the true
    # one needs a running max over the whole input in one partition): their order
    # among themselves is the engine's, their place among other keys' results close.
    so_far = F.max(_TIME).over(
        Window.orderBy(enc.ORDER).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    alone = alone.select(
        "k_m",
        F.when(side == 0, F.col("v_m")).alias("lv"),
        F.when(side == 1, F.col("v_m")).alias("rv"),
        _time_order(
            so_far - F.lit(node.grace + 1), F.concat(F.lit(_AT_END), F.col(enc.ORDER)), side
        ).alias(enc.ORDER),
    )
    w = Window.partitionBy("k_m").orderBy(_TIME, enc.ORDER)  # RANGE: peers included

    def latest(of: int, column: str) -> Column:
        return F.last(F.when(side == of, F.col(column)), ignorenulls=True).over(w)

    keyed = both.where(~null_key(enc.PACKED)).select(
        "k_m", _TIME, "v_m", enc.ORDER, "_side",
        latest(0, "v_m").alias("l_v"), latest(0, _TIME).alias("l_t"),
        latest(1, "v_m").alias("r_v"), latest(1, _TIME).alias("r_t"),
    )  # fmt: skip
    ttl = node.ttl or 0

    def valid(value: str, at: str) -> Column:
        found = F.col(at).isNotNull()
        if ttl:
            found = found & (F.col(at) + F.lit(ttl) >= F.col(_TIME))
        return F.when(found, F.col(value))

    rows = keyed.select(
        "k_m",
        F.when(side == 0, F.col("v_m")).otherwise(valid("l_v", "l_t")).alias("lv"),
        F.when(side == 1, F.col("v_m")).otherwise(valid("r_v", "r_t")).alias("rv"),
        _time_order(F.col(_TIME), F.col(enc.ORDER), side).alias(enc.ORDER),
        "_side",
    )
    answered = F.when(
        side == 0, F.lit(emits[0]) & (F.col("rv").isNotNull() | F.lit(outer[0]))
    ).otherwise(F.lit(emits[1]) & (F.col("lv").isNotNull() | F.lit(outer[1])))
    df = rows.where(answered).select("k_m", "lv", "rv", enc.ORDER)
    df = df.unionByName(alone)
    j = _Join(node.joiner, node.name, comp.policy(ls))
    return Stream(df.mapInArrow(j, j.schema()), enc.PACKED, enc.ANY, ordered=True, python=True)


def _time_order(t: Column, order: Column, side: Column) -> Column:
    """A result's ordering key: its record's time (8 bytes, big-endian, sign flipped so
    bytes compare as the numbers do), position (``_o``) and side: the order the engine
    answers a temporal join's records in."""
    flipped = t.bitwiseXOR(F.lit(-(2**63)).cast("bigint"))
    return F.concat(
        F.unhex(F.lpad(F.hex(flipped), 16, "0")), order, F.unhex(F.lpad(F.hex(side), 2, "0"))
    )


#: This module's translation rules (windowed aggregations, late records and joins), by node type;
#: registered with ``translate`` by :func:`rstreams.runtime.spark.rules.register_rules`,
#: not on import.
RULES: dict[type[n.Node], Rule] = {
    n.WindowAggregateNode: _window_aggregate,
    n.LateNode: _late,
    n.JoinNode: _join,
}
