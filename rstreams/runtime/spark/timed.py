"""Timed frames on Spark: a window's or join's input recompiled with its event time.

The compiled streams of this backend carry no timestamps, so a window or join recompiles
its input *timed*: from the ``selectTimestamp`` step down to the window or join, every
Python step runs on ``(ts, value)`` pairs (the same functions, wrapped; names and error
reporting unchanged), then one ``mapInArrow`` splits the pairs into a native ``_t`` column
(epoch ms) and the value. Used by the batch rules of :mod:`.windows` and the Structured
Streaming rules of :mod:`.stateful` (which is why it is a module of its own, below both).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa

from rstreams.dsl import nodes as n
from rstreams.errors import UnsupportedOperation
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.compiler import Compiler, Stream
from rstreams.runtime.spark.segments import ErrorPolicy, PyStep
from rstreams.userfn import as_timestamp
from rstreams.windowed import Windowed

__all__ = ["join_side_frame", "timed_frame"]

_TIME = "_t"


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
    (optionally ``fn(value)``: the partial of sum/min/max); keys and ``_o`` pass.

    With ``windows`` (a tumbling or hopping spec) each record comes out once per window
    it belongs to (``spec.windows_for(ts)``, as on the embedded engine), keyed by the
    packed ``Windowed(key, start, end)``: the key a fold of each window groups by."""

    key_kind: str
    kind: str
    ordered: bool
    policy: ErrorPolicy
    name: str = ""
    partial: Any = None
    windows: Any = None

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
            if self.windows is not None:
                rb, pairs, values = self._per_window(rb, pairs, values)
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

    def _per_window(
        self, rb: pa.RecordBatch, pairs: list[Any], values: list[Any]
    ) -> tuple[pa.RecordBatch, list[Any], list[Any]]:
        """One row per (record, window), keyed by the packed ``Windowed``."""
        keys = enc.decode([rb.column(rb.schema.names.index("k_m"))], enc.PACKED, rb.num_rows)
        spec = self.windows
        idx: list[int] = []
        windowed: list[Windowed] = []
        for i, (pair, k) in enumerate(zip(pairs, keys)):
            for start, end in spec.windows_for(pair[0]):
                idx.append(i)
                windowed.append(Windowed(k, start, end))
        rb = rb.take(pa.array(idx, pa.int64()))
        at = rb.schema.names.index("k_m")
        rb = rb.set_column(at, rb.schema.field(at), enc.encode(windowed, enc.PACKED)[0])
        return rb, [pairs[i] for i in idx], [values[i] for i in idx]


def timed_frame(
    comp: Compiler,
    node: n.Node,
    target: n.Node,
    ordered: bool,
    value_kind: str,
    key_fn: Any = None,
    partial: Any = None,
    windows: Any = None,
) -> Stream:
    """``node``'s records as a DataFrame of packed keys ``k_m``, ``_t`` and the value in
    ``value_kind`` (keyed by ``key_fn(value)`` if given: a join side; ``partial(value)``
    if given: the function of sum/min/max; one row per window of a tumbling or hopping
    ``windows`` spec, keyed by the packed ``Windowed``, if given)."""
    s = _timed(comp, node, target, ordered)
    if key_fn is not None:
        s = comp.add_step(s, PyStep("keyBy", target.name, _Of(key_fn), key_fn))
    s = comp.flush(s, as_key=enc.PACKED, as_value=enc.PACKED, encode_step=target.name)
    if key_fn is None:
        # A window aggregation's input: None keys are skipped (a join side keeps them:
        # the join's own rule applies).
        s = comp.without_null_keys(s)
    u = _Untime(enc.PACKED, value_kind, ordered, comp.policy(s), target.name, partial, windows)
    df = s.df.mapInArrow(u, u.schema())
    return attrs.evolve(s, df=df, value=value_kind, aligned=False)


def _stamped_upstream(node: n.Node) -> bool:
    """Is there a ``selectTimestamp`` anywhere upstream of (or at) ``node``?"""
    seen: set[int] = set()
    todo = [node]
    while todo:
        x = todo.pop()
        if isinstance(x, n.SelectTimestampNode):
            return True
        if id(x) not in seen:
            seen.add(id(x))
            todo.extend(x.parents)
    return False


def join_side_frame(comp: Compiler, node: n.Node, target: n.Node, key_fn: Any) -> Stream:
    """One side of a temporal join (``target``, no window): packed keys ``k_m``, ``_t``,
    packed values ``v_m`` and ``_o``. With no ``selectTimestamp`` upstream every ``_t``
    is 0, so records are ordered by position alone: the order of the engine's ingestion
    timestamps within one input file."""
    if _stamped_upstream(node):
        return timed_frame(comp, node, target, True, enc.PACKED, key_fn)
    from pyspark.sql import functions as F

    s = comp.get(node, True)
    s = comp.add_step(s, PyStep("keyBy", target.name, key_fn, key_fn), unique=False)
    s = comp.flush(s, as_key=enc.PACKED, as_value=enc.PACKED, encode_step=target.name)
    df = s.df.select("k_m", F.lit(0).cast("bigint").alias(_TIME), "v_m", enc.ORDER)
    return attrs.evolve(s, df=df, aligned=False)
