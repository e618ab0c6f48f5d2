"""Processors of the embedded engine: phase 3 of the build.

Processors take columnar :class:`~rstreams.runtime.engine.operators.batch.Batch` es. Pure steps
(map, flatMap, filter, keyBy, selectTimestamp) call the user function over a whole
column with ``map()`` (built-ins with their C-level ``column()``) and, only if that
raises, go again record by record to find the failing record and apply the
``on_error`` policy (so user functions of those steps should be pure). Steps with side
effects (foreach, peek, print) go record by record, so a failure never repeats a side
effect; aggregations too, except for the batch merge of partials below.

Shuffles in front of count/sum/min/max carry *partial aggregates*: the shuffle sink
turns each value into a partial (1 for count, ``fn(value)`` for the others) and, when
``EngineConfig.combine`` is on, merges them per key until the task's next commit before
they cross the shuffle (map-side combine); the aggregation merges partials into its
state a batch at a time. The test driver turns combining off so that every record
makes its own update. The sinks are in :mod:`rstreams.runtime.engine.operators.sinks`.

The test driver processes a record at a time: :meth:`Processor.one` takes the one
record as arguments, and the steps it passes through most (map, filter, keyBy,
selectTimestamp, flatMap, pass-through steps, count and other aggregations, sinks)
override it to do what a batch of that record would do with no batch built, handing
it straight to their only child's ``one``; the others get a batch of one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from itertools import chain
from typing import Any

from rstreams.dsl import nodes as n
from rstreams.functions import Builtin
from rstreams.planner.topology import ProcessorBuilder, ProcessorFactory, register_processor
from rstreams.runtime.engine.operators.batch import Batch
from rstreams.runtime.engine.operators.context import StreamContext
from rstreams.runtime.engine.operators.fused import FusedRun, fused_run
from rstreams.runtime.engine.operators.record import Record
from rstreams.runtime.queues.base import Headers, RecordColumns
from rstreams.runtime.streamentries import BadEntryError, bad_entries
from rstreams.semantics.nullkeys import NULL_KEYS
from rstreams.serde import (
    INTERNAL_SERDE,
    Serde,
    deserialize_rows,
    remembering_decoder,
)
from rstreams.userfn import as_timestamp, call_each, is_identity, map_column

#: The processor kinds defined here: kind -> builder (see ``operators.registry``).
BUILDERS: dict[str, ProcessorBuilder] = {}


class Processor:
    """Base processor: receives batches, forwards batches to every child."""

    def __init__(self, factory: ProcessorFactory) -> None:
        self.name = factory.name
        self.kind = factory.kind
        self.children: list[Processor] = []
        self.ctx: StreamContext
        #: Records received and passed on (a sink: sent), counted a batch at a time for
        #: the live statistics (see ``rstreams.runtime.engine.coordination.stats``).
        self.records_in = 0
        self.records_out = 0
        self.next_one = self.forward_one

    def link(self, children: list[Processor]) -> None:
        self.children = children
        #: Where :meth:`one` hands a record on: the only child's ``one`` itself (a call
        #: less per record and step), else :meth:`forward_one`.
        self.next_one = children[0].one if len(children) == 1 else self.forward_one

    def init(self, ctx: StreamContext) -> None:
        self.ctx = ctx

    def process(self, batch: Batch) -> None:
        raise NotImplementedError

    def forward(self, batch: Batch) -> None:
        # send_to(self.children, batch), inline: every record passes here at each step.
        n = len(batch.values)
        if n:
            self.records_out += n
            for child in self.children:
                child.records_in += n
                child.process(batch)

    def one(self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int) -> None:
        """:meth:`process` of a batch of this one record (from ``offset`` of ``topic``):
        the test driver's record at a time. The steps it passes through most override
        it to do the same with no batch built: each counts the record it receives, and
        the one it passes on (to :attr:`next_one`)."""
        self.records_in += 1
        hs = [headers] if headers else None
        self.process(Batch(topic, self.ctx.queue, [key], [value], [ts], [offset], hs))

    def forward_one(
        self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int
    ) -> None:
        """:meth:`forward` of one record (counted passed on by the caller)."""
        for child in self.children:
            child.one(key, value, ts, headers, topic, offset)

    def failed_one(
        self, step: str, record: tuple[Any, Any, int, Headers, str, int], e: Exception, fn: Any
    ) -> None:
        """The on_error policy for the one record (``one``'s arguments) that failed in
        ``step``, as a batch of it would apply it."""
        key, value, ts, headers, topic, offset = record
        row = Record(key, value, ts, headers or (), topic, self.ctx.queue, offset)
        self.ctx.handle_error(step, row, e, fn)

    def send_to(self, children: list[Processor], batch: Batch) -> None:
        """Hand ``batch`` to ``children`` (some of this processor's children)."""
        n = len(batch.values)
        self.records_out += n
        for child in children:
            child.records_in += n
            child.process(batch)

    def without_null_keys(self, batch: Batch) -> Batch:
        """``batch`` less its records whose key is None, counted under ``null_keys`` in
        the task's metrics: aggregations skip them (see ``rstreams.semantics.nullkeys``)."""
        keys = batch.keys
        if None not in keys:
            return batch
        keep = [i for i, k in enumerate(keys) if k is not None]
        self.ctx.metrics[NULL_KEYS] += len(keys) - len(keep)
        return batch.take(keep)

    def flush(self) -> None:
        """Called at commit, parents before children."""

    @property
    def holds(self) -> bool:
        """Whether this processor may hold records back until :meth:`flush` (with
        this task's configuration): only those are flushed at a commit."""
        return type(self).flush is not Processor.flush

    def held(self) -> int:
        """Entries (keys) held in memory until the next flush: counted against the
        process's cache budget."""
        return 0

    def punctuate(self, now: int) -> None:
        """Called with the wall clock (ms) now and then, for time-driven work."""

    def on_watermark(self) -> None:
        """The task's input watermark (``ctx.watermark``) moved: time-driven work."""

    def end_of_input(self) -> None:
        """Bounded input is over: emit what waits for more input (open windows)."""

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def apply_column(
    ctx: StreamContext, step: str, fn: Callable[[Any], Any], user_fn: Any, batch: Batch
) -> tuple[list[Any], Batch]:
    """``fn`` over the values at C speed; only if that raises, again row by row to apply
    the on_error policy to the failing rows. Returns the results and the surviving rows."""
    results, keep = map_column(
        fn,
        batch.values,
        lambda i, e: ctx.handle_error(step, batch.row(i), e, user_fn),
        fn.column if isinstance(fn, Builtin) else None,
    )
    return results, batch if keep is None else batch.take(keep)


class FnProcessor(Processor):
    """A step that applies one user function to each value."""

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert isinstance(factory.node, n.FnNode)
        self.fn: Callable[..., Any] = factory.node.fn
        #: A run of built-ins from this step evaluated a batch at a time (see fused.py).
        self.fused: FusedRun | None = None

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        if self.kind in ("map", "flatMap") and isinstance(self.fn, Builtin):
            self.fused = fused_run(self)

    def apply(
        self, batch: Batch, fn: Callable[[Any], Any] | None = None
    ) -> tuple[list[Any], Batch]:
        """``[fn(v) for v in values]`` and the batch of the rows that did not fail."""
        return apply_column(self.ctx, self.name, fn or self.fn, self.fn, batch)

    #: What :meth:`one` does with the function's result (None: the step takes a batch
    #: of one): ``(key, value, ts, headers, topic, offset, result)``.
    _passed: Callable[..., None] | None = None

    def _one_fn(self, value: Any) -> Any:
        """The step's function on one value, as :meth:`apply` applies it."""
        return self.fn(value)

    def one(self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int) -> None:
        passed = self._passed
        if passed is None or self.fused is not None:
            Processor.one(self, key, value, ts, headers, topic, offset)
            return
        self.records_in += 1
        try:
            result = self._one_fn(value)
        except Exception as e:
            self.failed_one(self.name, (key, value, ts, headers, topic, offset), e, self.fn)
            return
        passed(key, value, ts, headers, topic, offset, result)


@register_processor("map", BUILDERS)
class MapProcessor(FnProcessor):
    def process(self, batch: Batch) -> None:
        if self.fused is not None and self.fused(batch):
            return
        values, batch = self.apply(batch)
        self.forward(batch.with_values(values))

    def _passed(
        self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int, result: Any
    ) -> None:
        self.records_out += 1
        self.next_one(key, result, ts, headers, topic, offset)


@register_processor("filter", BUILDERS)
class FilterProcessor(FnProcessor):
    def process(self, batch: Batch) -> None:
        mask, batch = self.apply(batch)
        self.forward(batch.select(mask))

    def _passed(
        self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int, result: Any
    ) -> None:
        if result:
            self.records_out += 1
            self.next_one(key, value, ts, headers, topic, offset)


@register_processor("keyBy", BUILDERS)
class KeyByProcessor(FnProcessor):
    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        #: ``keyBy(lambda w: w)``: the values are the keys, as they are (the same list:
        #: a batch's columns never change).
        self.identity = is_identity(self.fn)

    def process(self, batch: Batch) -> None:
        if self.identity:
            self.forward(batch.with_keys(batch.values))
            return
        keys, batch = self.apply(batch)
        self.forward(batch.with_keys(keys))

    def one(self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int) -> None:
        if not self.identity:
            super().one(key, value, ts, headers, topic, offset)
            return
        self.records_in += 1
        self.records_out += 1
        self.next_one(value, value, ts, headers, topic, offset)

    def _passed(
        self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int, result: Any
    ) -> None:
        self.records_out += 1
        self.next_one(result, value, ts, headers, topic, offset)


@register_processor("selectTimestamp", BUILDERS)
class SelectTimestampProcessor(FnProcessor):
    def process(self, batch: Batch) -> None:
        fn = self.fn
        stamps, batch = self.apply(batch, lambda v: as_timestamp(fn(v)))
        self.forward(batch.with_timestamps(stamps))

    def _one_fn(self, value: Any) -> Any:
        return as_timestamp(self.fn(value))

    def _passed(
        self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int, result: Any
    ) -> None:
        self.records_out += 1
        self.next_one(key, value, result, headers, topic, offset)


@register_processor("flatMap", BUILDERS)
class FlatMapProcessor(FnProcessor):
    def process(self, batch: Batch) -> None:
        if self.fused is not None and self.fused(batch):
            return
        outs, batch = self.apply(batch)
        if not set(map(type, outs)) <= {list, tuple}:
            outs, batch = self._materialize(outs, batch)
        self.forward(batch.expand(list(map(len, outs)), list(chain.from_iterable(outs))))

    def _one_fn(self, value: Any) -> Any:
        # A copy (the user may keep the list), a generator run now (see _materialize).
        return list(self.fn(value))

    def _passed(
        self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int, result: Any
    ) -> None:
        n = len(result)
        if n == 1:
            self.records_out += 1
            self.next_one(key, result[0], ts, headers, topic, offset)
        elif n:  # the batch expand() would make of it
            hs = [headers] * n if headers else None
            batch = Batch(topic, self.ctx.queue, [key] * n, result, [ts] * n, [offset] * n, hs, ts)
            self.forward(batch)

    def _materialize(self, outs: list[Any], batch: Batch) -> tuple[list[Any], Batch]:
        # Generators and other iterables run now, one by one: a failure half-way through
        # one must emit nothing for that record, and follows the on_error policy.
        results: list[Any] = []
        keep: list[int] = []
        for i, out in enumerate(outs):
            if type(out) not in (list, tuple):
                try:
                    out = list(out)
                except Exception as e:
                    self.ctx.handle_error(self.name, batch.row(i), e, self.fn)
                    continue
            results.append(out)
            keep.append(i)
        return results, (batch if len(keep) == len(outs) else batch.take(keep))


@register_processor("foreach", BUILDERS)
class ForeachProcessor(FnProcessor):
    """Terminal: ``fn(value)`` once per record, in order; a failure never replays."""

    def process(self, batch: Batch) -> None:
        fn = self.fn
        for i, v in enumerate(batch.values):
            try:
                fn(v)
            except Exception as e:
                self.ctx.handle_error(self.name, batch.row(i), e, fn)


@register_processor("peek", BUILDERS)
class PeekProcessor(FnProcessor):
    """``fn(value)`` once per record for its side effect; failed records stop here."""

    def process(self, batch: Batch) -> None:
        fn, ctx = self.fn, self.ctx
        keep = call_each(
            fn, batch.values, lambda i, e: ctx.handle_error(self.name, batch.row(i), e, fn)
        )
        self.forward(batch if keep is None else batch.take(keep))


@register_processor("print", BUILDERS)
class PrintProcessor(Processor):
    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert isinstance(factory.node, n.PrintNode)
        self.prefix = f"[{factory.node.label}] " if factory.node.label else ""

    def process(self, batch: Batch) -> None:
        p = self.prefix
        lines = [
            f"{p}{v}" if k is None else f"{p}{k}: {v}" for k, v in zip(batch.keys, batch.values)
        ]
        sys.stdout.write("\n".join(lines) + "\n")


@register_processor("merge", BUILDERS)
@register_processor("toRStream", BUILDERS)
class PassThroughProcessor(Processor):
    process = Processor.forward  # (one call less for every record)

    def one(self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int) -> None:
        self.records_in += 1
        self.records_out += 1
        self.next_one(key, value, ts, headers, topic, offset)


class SourceProcessor(Processor):
    """Entry of a chain: deserializes stored records of one topic queue into a batch."""

    key_serde: Serde
    value_serde: Serde
    #: The topic is copied from an external stream (its records may be bad entries).
    external = False

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert factory.topic is not None
        self.topic = factory.topic

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        # Instance attributes: read for every record (see _SinkBase.init).
        self.key_serde, self.value_serde = self.key_serde, self.value_serde
        # For process_one (a record at a time): its failures go through process_log.
        self._kde = remembering_decoder(self.key_serde)
        self._vde = remembering_decoder(self.value_serde)

    def process_log(self, queue: int, records: RecordColumns) -> None:
        n = len(records.offsets)
        if not n:
            return
        self.records_in += n
        # Lists are taken as they are (a batch never changes them), others copied.
        timestamps: Any = records.timestamps
        offsets: Any = records.offsets
        if type(timestamps) is not list or type(offsets) is not list:
            timestamps, offsets = list(timestamps), list(offsets)
        headers: Any = records.headers
        if not any(headers):
            headers = None
        elif type(headers) is not list:
            headers = list(headers)
        if headers is not None and self.external:
            bad = bad_entries(headers)
            if bad:  # (entries the ingest could not read as declared: on_error decides)
                raw = Batch(
                    self.topic, queue, list(records.keys), list(records.values),
                    timestamps, offsets, headers,
                )  # fmt: skip
                for i, why in bad:
                    self.ctx.handle_error(self.name, raw.row(i), BadEntryError(why))
                dropped = {i for i, _ in bad}
                raw = raw.take([i for i in range(n) if i not in dropped])
                if not raw.offsets:
                    return
                records = RecordColumns(raw.offsets, raw.timestamps, raw.keys, raw.values,
                                        raw.headers or [])  # fmt: skip
                timestamps, offsets, headers = raw.timestamps, raw.offsets, raw.headers
        try:
            keys, values = deserialize_rows(
                self.key_serde, self.value_serde, records.keys, records.values
            )
        except Exception:
            raw_keys, raw_values = list(records.keys), list(records.values)
            raw = Batch(self.topic, queue, raw_keys, raw_values, timestamps, offsets, headers)
            keys, values, batch = self._one_by_one(raw)
            timestamps, offsets, headers = batch.timestamps, batch.offsets, batch.headers
        self.forward(Batch(self.topic, queue, keys, values, timestamps, offsets, headers))

    def process_one(
        self,
        queue: int,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
    ) -> None:
        """:meth:`process_log` of one stored record (the test driver's): a batch of one
        with no columns to look over."""
        try:
            k = None if key is None else self._kde(key)
            v = None if value is None else self._vde(value)
        except Exception:  # process_log applies the on_error policy
            one = RecordColumns([offset], [timestamp], [key], [value], [headers])
            self.process_log(queue, one)
            return
        self.records_in += 1
        self.records_out += 1
        self.next_one(k, v, timestamp, headers, self.topic, offset)

    def _one_by_one(self, batch: Batch) -> tuple[list[Any], list[Any], Batch]:
        kde, vde = self.key_serde.deserialize, self.value_serde.deserialize
        keys, values, keep = [], [], []
        for i, (k, v) in enumerate(zip(batch.keys, batch.values)):
            try:
                key = None if k is None else kde(k)
                value = None if v is None else vde(v)
            except Exception as e:
                self.ctx.handle_error(self.name, batch.row(i), e)
                continue
            keys.append(key)
            values.append(value)
            keep.append(i)
        return keys, values, batch.take(keep)

    def process(self, batch: Batch) -> None:
        self.forward(batch)


@register_processor("source", BUILDERS)
class UserSourceProcessor(SourceProcessor):
    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert isinstance(factory.node, n.SourceNode)
        self.key_serde = factory.node.key_serde
        self.value_serde = factory.node.value_serde
        self.external = factory.node.external is not None


@register_processor("shuffle-source", BUILDERS)
class ShuffleSourceProcessor(SourceProcessor):
    key_serde = INTERNAL_SERDE
    value_serde = INTERNAL_SERDE
