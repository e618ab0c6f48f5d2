"""Python steps as they run inside Spark's Python workers.

A *segment* is a run of consecutive Python steps (user functions, built-ins without a
native form, source deserializers) fused into one ``mapInArrow`` call: each Arrow batch
is decoded once, every step runs over whole columns (``list(map(fn, values))``), and the
result is encoded once. This is the embedded engine's processor chain, batch for batch,
with the same per-step semantics and ``on_error`` policy:

- pure steps (map, flatMap, filter, keyBy, selectTimestamp, deserialize) call the
  function over the column and, only if that raises, again row by row to find the
  failing record;
- peek and foreach go record by record, so a failure never repeats a side effect;
- a failing record stops the job (``fail``: the exception carries a JSON description
  that the driver turns into a :class:`~rstreams.errors.ProcessingError`), or is dropped
  and reported through an accumulator (``skip`` / ``dead-letter``).

:class:`Fold` and :class:`StreamFold` run reduce/aggregate (and the exact fallback of
sum/min/max) over records sorted by key and source order.
"""

from __future__ import annotations

import bisect
import itertools
import json
import operator
from collections.abc import Callable, Iterator
from itertools import chain, compress, repeat
from typing import Any

import attrs
import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from rstreams.runtime.gctune import tuned
from rstreams.runtime.results import letter_fields, row_json
from rstreams.runtime.spark import encoding as enc
from rstreams.semantics.aggregations import Aggregation
from rstreams.userfn import as_timestamp, call_each, describe_fn, map_column
from rstreams.windowed import result_row

FAILURE_MARK = "RSTREAMS-RECORD-FAILED:"
#: Arrow batches a fold emits at most (rows), to bound worker memory.
_OUT_BATCH = 8192


class RecordFailed(RuntimeError):
    """Raised in a worker when a record fails under ``on_error="fail"``.

    The message is :data:`FAILURE_MARK` followed by one line of JSON; the driver finds it
    in the Spark error and rebuilds a ProcessingError from it.
    """


class ListParam(AccumulatorParam):
    """AccumulatorParam collecting failure descriptions (dicts) from workers."""

    def zero(self, value: list[Any]) -> list[Any]:
        return []

    def addInPlace(self, a: list[Any], b: list[Any]) -> list[Any]:
        a.extend(b)
        return a


@attrs.frozen
class PyStep:
    """One Python step. ``kind`` is a step kind of the DSL or ``decode`` (source
    deserializer), ``identityKey`` (keyBy by the value itself) or ``partial`` (the
    function of sum/min/max, applied before the shuffle as the embedded engine does)."""

    kind: str
    name: str
    fn: Any = None
    user_fn: Any = None

    @property
    def one_to_one(self) -> bool:
        """Rows out == rows in, in order (when nothing fails)."""
        return self.kind not in ("flatMap", "filter", "foreach")


@attrs.frozen
class ErrorPolicy:
    """What a worker does with a record that fails."""

    on_error: str = "fail"
    accumulator: Any = None
    topic: str | None = None

    def failed(
        self,
        step: str,
        exc: BaseException,
        *,
        key: Any,
        value: Any,
        fn: Any = None,
        partition: int | None = None,
        row: int | None = None,
        order: bytes | None = None,
        seq: int | None = None,
    ) -> None:
        info = {
            "step": step,
            "topic": self.topic,
            "fn": fn_label(fn) if fn is not None else None,
            "error": f"{type(exc).__name__}: {exc}",
            **letter_fields("key", key, limit=_LETTER_LIMIT),
            **letter_fields("value", value, limit=_LETTER_LIMIT),
            "partition": partition,
            "row": row,
            "seq": seq,
            "order": order.hex() if order else None,
        }
        if self.on_error == "fail":
            raise RecordFailed(FAILURE_MARK + json.dumps(info)) from exc
        if self.accumulator is not None:
            self.accumulator.add([info])


def fn_label(fn: Any) -> str:
    """How error messages name a step's function: ``parse (p.py:3)`` or ``F.lower()``."""
    from rstreams.functions import Builtin

    return repr(fn) if isinstance(fn, Builtin) else describe_fn(fn)


#: The longest key or value a failed record's report carries whole (it travels in an
#: exception or an accumulator).
_LETTER_LIMIT = 2_000


def _partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


class _Rows:
    """Columns of the records of one batch as they go through the steps.

    ``keys`` is None while every key is None (records read from files). ``origin`` maps
    a row to the input row it came from (None: row i is input row i), built lazily so
    that a flatMap costs nothing per output word until a failure needs to be traced
    back to its source record (like the embedded engine's offsets).
    """

    __slots__ = ("keys", "order", "origin", "values")

    def __init__(
        self,
        keys: list[Any] | None,
        values: list[Any],
        order: list[Any] | None,
        origin: Callable[[int], int] | None = None,
    ) -> None:
        self.keys = keys
        self.values = values
        self.order = order
        self.origin = origin

    def __len__(self) -> int:
        return len(self.values)

    def key(self, i: int) -> Any:
        return None if self.keys is None else self.keys[i]

    def input_row(self, i: int) -> int:
        return i if self.origin is None else self.origin(i)

    def take(self, keep: list[int], values: list[Any] | None = None) -> _Rows:
        """The rows ``keep`` (indexes into this batch), in that order."""
        prev = self.origin
        origin = keep.__getitem__ if prev is None else (lambda i: prev(keep[i]))
        if not keep:
            return _Rows(None, [], [] if self.order is not None else None, origin)
        g = operator.itemgetter(*keep)

        def pick(col: list[Any]) -> list[Any]:
            return [col[keep[0]]] if len(keep) == 1 else list(g(col))

        return _Rows(
            None if self.keys is None else pick(self.keys),
            pick(self.values) if values is None else values,
            None if self.order is None else pick(self.order),
            origin,
        )

    def expand(self, lens: list[int], values: list[Any]) -> _Rows:
        """Row i repeated ``lens[i]`` times, with the new ``values`` (flatMap)."""
        cum = list(itertools.accumulate(lens))
        prev = self.origin

        def origin(i: int) -> int:
            j = bisect.bisect_right(cum, i)
            return j if prev is None else prev(j)

        keys = None
        if self.keys is not None:
            keys = list(chain.from_iterable(map(repeat, self.keys, lens)))
        order = None
        if self.order is not None:
            pos = chain.from_iterable(map(range, lens))
            parents = chain.from_iterable(map(repeat, self.order, lens))
            order = [o + enc.be32(p) for o, p in zip(parents, pos)]
        return _Rows(keys, values, order, origin)


@attrs.frozen
class Segment:
    """A fused run of Python steps; the callable given to ``mapInArrow``."""

    steps: tuple[PyStep, ...]
    in_key: str
    in_value: str
    out_key: str | None
    out_value: str | None
    policy: ErrorPolicy
    order_in: bool = False
    order_out: bool = False
    #: Streaming sources have no row ids: number rows here (source index), reading the
    #: file (``_f``) and split start (``_b``) columns.
    number: int | None = None
    #: Input rows are the source's rows, 1:1 and in order: report row indexes.
    aligned: bool = False
    #: Step named when an output value can not be stored (e.g. a set).
    encode_step: str = ""

    def schema(self) -> str:
        parts: list[str] = []
        if self.out_key is not None:
            parts += enc.ddl("k", self.out_key)
        if self.out_value is not None:
            parts += enc.ddl("v", self.out_value)
        if self.order_out:
            parts.append(f"{enc.ORDER} binary")
        if not parts:
            parts.append("_n bigint")
        return ", ".join(parts)

    @property
    def terminal(self) -> bool:
        return bool(self.steps) and self.steps[-1].kind == "foreach"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # A batch's records live until it is encoded: with CPython's default threshold
        # the collector walks them again and again (a third of a word count's time).
        with tuned():
            yield from self._run(batches)

    def _run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = _partition()
        base = 0
        counter = itertools.count()
        kcols = enc.columns("k", self.in_key)
        vcols = enc.columns("v", self.in_value)
        for rb in batches:
            n = rb.num_rows
            names = rb.schema.names
            col = rb.column
            keys = (
                None
                if self.in_key == enc.NONE
                else enc.decode([col(names.index(c)) for c in kcols], self.in_key, n)
            )
            values = enc.decode([col(names.index(c)) for c in vcols], self.in_value, n)
            order: list[Any] | None = None
            if self.number is not None:
                files = col(names.index("_f")).to_pylist()
                blocks = col(names.index("_b")).to_pylist()
                prefix = self.number.to_bytes(2, "big")
                order = [
                    prefix + f.encode("utf-8") + b"\x00" + enc.be64(b) + enc.be64(next(counter))
                    for f, b in zip(files, blocks)
                ]
            elif self.order_in:
                order = col(names.index(enc.ORDER)).to_pylist()
            rows = _Rows(keys, values, order, None)
            for step in self.steps:
                if not len(rows):
                    break
                rows = self._apply(step, rows, part, base)
            base += n
            if self.terminal:
                continue
            out = self._encode(rows, part, base - n)
            if out is not None:
                yield out

    # -- steps ----------------------------------------------------------------------

    def _fail(
        self, step: PyStep, rows: _Rows, i: int, exc: BaseException, part: int, base: int
    ) -> None:
        self.policy.failed(
            step.name,
            exc,
            key=rows.key(i),
            value=rows.values[i],
            fn=step.user_fn,
            partition=part,
            row=base + rows.input_row(i) if self.aligned else None,
            order=rows.order[i] if rows.order is not None else None,
            seq=base + rows.input_row(i),
        )

    def _column(
        self, step: PyStep, rows: _Rows, fn: Callable[[Any], Any], part: int, base: int
    ) -> tuple[list[Any], _Rows]:
        """``[fn(v) for v in values]`` and the rows that did not fail."""
        results, keep = map_column(
            fn, rows.values, lambda i, e: self._fail(step, rows, i, e, part, base)
        )
        return results, rows if keep is None else rows.take(keep)

    def _apply(self, step: PyStep, rows: _Rows, part: int, base: int) -> _Rows:
        kind = step.kind
        if kind in ("map", "partial", "decode"):
            values, rows = self._column(step, rows, step.fn, part, base)
            rows.values = values
            return rows
        if kind == "keyBy":
            keys, rows = self._column(step, rows, step.fn, part, base)
            rows.keys = keys
            return rows
        if kind == "identityKey":
            rows.keys = rows.values  # (lists are never changed in place)
            return rows
        if kind == "filter":
            mask, rows = self._column(step, rows, step.fn, part, base)
            keep = list(compress(range(len(mask)), mask))
            return rows if len(keep) == len(mask) else rows.take(keep)
        if kind == "flatMap":
            outs, rows = self._column(step, rows, step.fn, part, base)
            broken: list[int] = []
            for i, out in enumerate(() if set(map(type, outs)) <= _SEQUENCES else outs):
                if type(out) is not list and type(out) is not tuple:
                    # An iterator failing half-way must emit nothing for its record.
                    try:
                        outs[i] = list(out)
                    except Exception as e:
                        self._fail(step, rows, i, e, part, base)
                        broken.append(i)
            if broken:
                bad = set(broken)
                keep = [i for i in range(len(outs)) if i not in bad]
                outs = [outs[i] for i in keep]
                rows = rows.take(keep)
            lens = list(map(len, outs))
            return rows.expand(lens, list(chain.from_iterable(outs)))
        if kind == "selectTimestamp":
            fn = step.fn
            _, rows = self._column(step, rows, lambda v: as_timestamp(fn(v)), part, base)
            return rows
        if kind in ("peek", "foreach"):
            passed = call_each(
                step.fn, rows.values, lambda i, e: self._fail(step, rows, i, e, part, base)
            )
            return rows if passed is None else rows.take(passed)
        raise AssertionError(kind)

    def _encode(self, rows: _Rows, part: int, base: int) -> pa.RecordBatch | None:
        while True:
            try:
                return self._encode_once(rows)
            except enc.EncodeError as e:
                step = PyStep("encode", self.encode_step or self.steps[-1].name)
                self._fail(step, rows, e.index, e, part, base)
                rows = rows.take([i for i in range(len(rows)) if i != e.index])

    def _encode_once(self, rows: _Rows) -> pa.RecordBatch | None:
        arrays: list[pa.Array] = []
        fields: list[pa.Field] = []
        if self.out_key is not None:
            keys = [None] * len(rows) if rows.keys is None else rows.keys
            arrays += enc.encode(keys, self.out_key)
            fields += enc.arrow_fields("k", self.out_key)
        if self.out_value is not None:
            arrays += enc.encode(rows.values, self.out_value)
            fields += enc.arrow_fields("v", self.out_value)
        if self.order_out:
            arrays.append(pa.array(rows.order or [], pa.binary()))
            fields.append(pa.field(enc.ORDER, pa.binary()))
        if not fields:
            arrays.append(pa.array([len(rows)], pa.int64()))
            fields.append(pa.field("_n", pa.int64()))
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


# -- folds ----------------------------------------------------------------------------------


_SEQUENCES = {list, tuple}


@attrs.frozen
class Fold:
    """reduce/aggregate (or exact sum/min/max) over rows sorted by key, then ``_o``.

    The callable given to ``mapInArrow`` after ``repartition(keys)`` and
    ``sortWithinPartitions(keys, _o)``: one Python call per batch, not per group.
    Emits one row per key: its final aggregate and the ordering key of the last record
    that updated it (when the embedded engine emitted that final update).
    """

    op: str
    name: str
    key_kind: str
    value_kind: str
    policy: ErrorPolicy
    fn: Any = None
    initializer: Any = None
    order_out: bool = False

    def schema(self) -> str:
        parts = enc.ddl("k", self.key_kind) + enc.ddl("v", enc.ANY)
        if self.order_out:
            parts.append(f"{enc.ORDER} binary")
        return ", ".join(parts)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with tuned():  # (as Segment)
            yield from self._run(batches)

    def _run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        update = Aggregation.of_parts(self.op, self.fn, self.initializer).fold_update
        kcols = enc.columns("k", self.key_kind)
        vcols = enc.columns("v", self.value_kind)
        out_keys: list[tuple[Any, ...]] = []
        out_vals: list[Any] = []
        out_order: list[Any] = []
        missing = object()
        cur: Any = missing
        acc: Any = None
        last: Any = None
        seen = False
        part = _partition()
        seq = 0

        def emit() -> None:
            if cur is not missing and seen:
                out_keys.append(cur)
                out_vals.append(acc)
                out_order.append(last)

        for rb in batches:
            n = rb.num_rows
            names = rb.schema.names
            raw = [rb.column(names.index(c)).to_pylist() for c in kcols]
            keys: list[Any] = list(zip(*raw)) if raw else [()] * n
            values = enc.decode([rb.column(names.index(c)) for c in vcols], self.value_kind, n)
            order = rb.column(names.index(enc.ORDER)).to_pylist()
            for k, v, o in zip(keys, values, order):
                seq += 1
                if k != cur:
                    emit()
                    cur, acc, last, seen = k, None, None, False
                try:
                    acc = update(acc, v)
                except Exception as e:
                    key = enc.decode([[x] for x in k], self.key_kind, 1)[0] if k else None
                    self.policy.failed(
                        self.name,
                        e,
                        key=key,
                        value=v,
                        fn=self.fn,
                        partition=part,
                        order=o,
                        seq=seq,
                    )
                    continue
                last, seen = o, True
            if len(out_keys) >= _OUT_BATCH:
                yield self._batch(out_keys, out_vals, out_order)
                out_keys, out_vals, out_order = [], [], []
        emit()
        if out_keys:
            yield self._batch(out_keys, out_vals, out_order)

    def _batch(
        self, keys: list[tuple[Any, ...]], vals: list[Any], order: list[Any]
    ) -> pa.RecordBatch:
        kfields = enc.arrow_fields("k", self.key_kind)
        fields = kfields + enc.arrow_fields("v", enc.ANY)
        arrays = [pa.array([k[j] for k in keys], f.type) for j, f in enumerate(kfields)]
        try:
            arrays += enc.encode(vals, enc.ANY)
        except enc.EncodeError as e:
            key = enc.decode([[x] for x in keys[e.index]], self.key_kind, 1)[0]
            self.policy.failed(self.name, e, key=key, value=vals[e.index], fn=self.fn)
            del keys[e.index], vals[e.index], order[e.index]
            return self._batch(keys, vals, order)
        if self.order_out:
            arrays.append(pa.array(order, pa.binary()))
            fields.append(pa.field(enc.ORDER, pa.binary()))
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


@attrs.frozen
class StreamFold:
    """reduce/aggregate on Structured Streaming (``applyInPandasWithState``).

    Keys and values arrive msgpack-packed (``k_m``, ``v_m``): pandas would turn
    nullable integer columns into floats. The state holds the packed accumulator.
    """

    op: str
    name: str
    policy: ErrorPolicy
    fn: Any = None
    initializer: Any = None

    OUTPUT = "k_m binary, v_m binary, _o binary"
    STATE = "acc binary"

    def __call__(self, key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        from rstreams.serde import INTERNAL_SERDE

        pack, unpack = INTERNAL_SERDE.serialize, INTERNAL_SERDE.deserialize
        update = Aggregation.of_parts(self.op, self.fn, self.initializer).fold_update
        acc = unpack(state.get[0]) if state.exists else None
        frames = [p for p in pdfs if len(p)]
        if not frames:
            return
        rows = pd.concat(frames).sort_values(enc.ORDER, kind="stable")
        last = None
        k = unpack(key[0])
        for m, o in zip(rows["v_m"], rows[enc.ORDER]):
            v = unpack(m)
            try:
                acc = update(acc, v)
            except Exception as e:
                self.policy.failed(self.name, e, key=k, value=v, fn=self.fn, order=o)
                continue
            last = o
        if last is None:
            return
        try:
            packed = pack(acc)
        except Exception as e:
            self.policy.failed(self.name, e, key=k, value=acc, fn=self.fn)
            return
        state.update((packed,))
        yield pd.DataFrame({"k_m": [key[0]], "v_m": [packed], enc.ORDER: [last]})


@attrs.frozen
class TableLines:
    """Final-table rows -> the JSON lines of
    :func:`rstreams.runtime.results.table_lines`, on the executors (for outputs too big
    to collect). Keys and values go through the sink's serdes first, as in
    :func:`rstreams.runtime.spark.tables.add_rows`."""

    name: str
    key_serde: Any
    value_serde: Any
    key_kind: str
    value_kind: str
    policy: ErrorPolicy

    @classmethod
    def of(cls, sink: Any, key_kind: str, value_kind: str, policy: ErrorPolicy) -> TableLines:
        return cls(sink.name, sink.key_serde, sink.value_serde, key_kind, value_kind, policy)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        kser, vser = self.key_serde.serialize, self.value_serde.serialize
        kde, vde = self.key_serde.deserialize, self.value_serde.deserialize
        for rb in batches:
            n = rb.num_rows
            names = rb.schema.names
            keys = enc.decode(
                [rb.column(names.index(c)) for c in enc.columns("k", self.key_kind)],
                self.key_kind,
                n,
            )
            values = enc.decode(
                [rb.column(names.index(c)) for c in enc.columns("v", self.value_kind)],
                self.value_kind,
                n,
            )
            lines = []
            for k, v in zip(keys, values):
                try:
                    kb = None if k is None else kser(k)
                    vb = None if v is None else vser(v)
                except Exception as e:
                    self.policy.failed(self.name, e, key=k, value=v)
                    continue
                key = enc.hashable(None if kb is None else kde(kb))
                value = None if vb is None else vde(vb)
                lines.append(row_json(result_row(key, value)))
            yield pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], names=["value"])
