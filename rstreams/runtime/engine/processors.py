"""Processors of the embedded engine: phase 3 of the build.

Every processor takes *batches* (lists of :class:`Record`) so that Python's per-call
overhead is paid per batch where the step allows it; the test driver sends batches of
one record. Pure steps (map, flatMap, filter, keyBy, selectTimestamp) run a list
comprehension and, only if it raises, replay the batch record by record to find the
failing record and apply the ``on_error`` policy. Steps with side effects (foreach,
peek, print) and aggregations go record by record, so a failure never repeats a side
effect.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import Any

from rstreams.dsl import nodes as n
from rstreams.errors import SerdeError
from rstreams.planner.topology import ProcessorFactory, register_processor
from rstreams.runtime.engine.context import StreamContext
from rstreams.runtime.engine.record import Record
from rstreams.runtime.queues.base import LogRecord, queue_for_key
from rstreams.serde import INTERNAL_SERDE, Serde

Batch = list[Record]


class Processor:
    """Base processor: receives batches, forwards batches to every child."""

    def __init__(self, factory: ProcessorFactory) -> None:
        self.name = factory.name
        self.children: list[Processor] = []
        self.ctx: StreamContext

    def link(self, children: list[Processor]) -> None:
        self.children = children

    def init(self, ctx: StreamContext) -> None:
        self.ctx = ctx

    def process(self, batch: Batch) -> None:
        raise NotImplementedError

    def forward(self, batch: Batch) -> None:
        if batch:
            for child in self.children:
                child.process(batch)

    def flush(self) -> None:
        """Called at commit, parents before children."""

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FnProcessor(Processor):
    """A pure per-record function step with a fast batch path."""

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert isinstance(factory.node, n.FnNode)
        self.fn: Callable[..., Any] = factory.node.fn

    def fast(self, batch: Batch) -> Batch:
        raise NotImplementedError

    def one(self, record: Record, out: Batch) -> None:
        raise NotImplementedError

    def process(self, batch: Batch) -> None:
        try:
            out = self.fast(batch)
        except Exception:
            out = []
            for r in batch:
                try:
                    self.one(r, out)
                except Exception as e:
                    self.ctx.handle_error(self.name, r, e, self.fn)
        self.forward(out)


@register_processor("map")
class MapProcessor(FnProcessor):
    def fast(self, batch: Batch) -> Batch:
        fn = self.fn
        return [r.with_value(fn(r.value)) for r in batch]

    def one(self, record: Record, out: Batch) -> None:
        out.append(record.with_value(self.fn(record.value)))


@register_processor("flatMap")
class FlatMapProcessor(FnProcessor):
    def fast(self, batch: Batch) -> Batch:
        fn = self.fn
        return [r.with_value(v) for r in batch for v in fn(r.value)]

    def one(self, record: Record, out: Batch) -> None:
        # Materialize first so a failure half-way through emits nothing for the record.
        values = list(self.fn(record.value))
        out.extend(record.with_value(v) for v in values)


@register_processor("filter")
class FilterProcessor(FnProcessor):
    def fast(self, batch: Batch) -> Batch:
        fn = self.fn
        return [r for r in batch if fn(r.value)]

    def one(self, record: Record, out: Batch) -> None:
        if self.fn(record.value):
            out.append(record)


@register_processor("keyBy")
class KeyByProcessor(FnProcessor):
    def fast(self, batch: Batch) -> Batch:
        fn = self.fn
        return [r.with_key(fn(r.value)) for r in batch]

    def one(self, record: Record, out: Batch) -> None:
        out.append(record.with_key(self.fn(record.value)))


def _timestamp(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a timestamp must be epoch milliseconds (int); got {type(value).__name__}")
    return int(value)


@register_processor("selectTimestamp")
class SelectTimestampProcessor(FnProcessor):
    def fast(self, batch: Batch) -> Batch:
        fn = self.fn
        return [r.with_timestamp(_timestamp(fn(r.value))) for r in batch]

    def one(self, record: Record, out: Batch) -> None:
        out.append(record.with_timestamp(_timestamp(self.fn(record.value))))


@register_processor("foreach")
class ForeachProcessor(FnProcessor):
    """Terminal: ``fn(value)`` once per record, in order; a failure never replays."""

    def process(self, batch: Batch) -> None:
        fn = self.fn
        for r in batch:
            try:
                fn(r.value)
            except Exception as e:
                self.ctx.handle_error(self.name, r, e, fn)


@register_processor("peek")
class PeekProcessor(FnProcessor):
    """``fn(value)`` once per record for its side effect; failed records stop here."""

    def process(self, batch: Batch) -> None:
        fn = self.fn
        out: Batch = []
        for r in batch:
            try:
                fn(r.value)
            except Exception as e:
                self.ctx.handle_error(self.name, r, e, fn)
                continue
            out.append(r)
        self.forward(out)


@register_processor("print")
class PrintProcessor(Processor):
    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert isinstance(factory.node, n.PrintNode)
        self.prefix = f"[{factory.node.label}] " if factory.node.label else ""

    def process(self, batch: Batch) -> None:
        p = self.prefix
        lines = [f"{p}{r.value}" if r.key is None else f"{p}{r.key}: {r.value}" for r in batch]
        sys.stdout.write("\n".join(lines) + "\n")


@register_processor("merge")
@register_processor("toRStream")
class PassThroughProcessor(Processor):
    def process(self, batch: Batch) -> None:
        self.forward(batch)


class _Updater:
    """The per-op update rule of an aggregation: new = update(old_or_None, value)."""

    @staticmethod
    def make(node: n.AggregateNode) -> tuple[Callable[[Any, Any], Any], Any]:
        fn = node.fn
        op = node.op
        if op == "count":
            return (lambda old, v: 1 if old is None else old + 1), None
        if op == "sum":
            if fn is None:
                return (lambda old, v: v if old is None else old + v), None
            return (lambda old, v: fn(v) if old is None else old + fn(v)), fn
        if op in ("min", "max"):
            pick = min if op == "min" else max
            if fn is None:
                return (lambda old, v: v if old is None else pick(old, v)), None
            return (lambda old, v: fn(v) if old is None else pick(old, fn(v))), fn
        if op == "reduce":
            assert fn is not None
            return (lambda old, v: v if old is None else fn(old, v)), fn
        if op == "aggregate":
            init = node.initializer
            assert fn is not None and init is not None
            return (lambda old, v: fn(init() if old is None else old, v)), fn
        raise AssertionError(op)


@register_processor("aggregate")
class AggregateProcessor(Processor):
    """Keyed aggregation over a state store; emits (key, new aggregate) per record.

    With ``coalesce`` on, only the latest update per key is kept and emitted at flush.
    """

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert isinstance(factory.node, n.AggregateNode)
        self.store_name = factory.stores[0]
        self.update, self.user_fn = _Updater.make(factory.node)
        self.pending: dict[Any, Record] = {}

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        self.store = ctx.store(self.store_name)
        self.coalesce = ctx.config.coalesce

    def process(self, batch: Batch) -> None:
        get, put, update = self.store.get, self.store.put, self.update
        out: Batch = []
        for r in batch:
            k = r.key
            try:
                new = update(get(k), r.value)
                put(k, new)
            except Exception as e:
                self.ctx.handle_error(self.name, r, e, self.user_fn)
                continue
            out.append(r.with_value(new))
        if self.coalesce:
            pending = self.pending
            for r in out:
                pending[r.key] = r
        else:
            self.forward(out)

    def flush(self) -> None:
        if self.pending:
            out = list(self.pending.values())
            self.pending.clear()
            self.forward(out)


class _SinkBase(Processor):
    """Serializes records and hands them to the producer, partitioned by key."""

    key_serde: Serde
    value_serde: Serde

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert factory.topic is not None
        self.topic = factory.topic
        self._round_robin = itertools.count()

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        self.queues = ctx.producer.queue_count(self.topic)

    def process(self, batch: Batch) -> None:
        kser, vser, nq = self.key_serde.serialize, self.value_serde.serialize, self.queues
        send = self.ctx.producer.send
        rr = next(self._round_robin) % nq  # keyless records of one batch stay together
        for r in batch:
            try:
                kb = None if r.key is None else kser(r.key)
                vb = None if r.value is None else vser(r.value)
            except SerdeError as e:
                self.ctx.handle_error(self.name, r, e)
                continue
            q = rr if kb is None else queue_for_key(kb, nq)
            send(self.topic, q, kb, vb, r.timestamp, r.headers)


@register_processor("sink")
class SinkProcessor(_SinkBase):
    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert isinstance(factory.node, n.SinkNode)
        self.key_serde = factory.node.key_serde
        self.value_serde = factory.node.value_serde


@register_processor("shuffle-sink")
class ShuffleSinkProcessor(_SinkBase):
    key_serde = INTERNAL_SERDE
    value_serde = INTERNAL_SERDE


class SourceProcessor(Processor):
    """Entry of a chain: deserializes stored records of one topic queue."""

    key_serde: Serde
    value_serde: Serde

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert factory.topic is not None
        self.topic = factory.topic

    def process_log(self, queue: int, records: list[LogRecord]) -> None:
        kde, vde, topic = self.key_serde.deserialize, self.value_serde.deserialize, self.topic
        out: Batch = []
        for lr in records:
            try:
                key = None if lr.key is None else kde(lr.key)
                value = None if lr.value is None else vde(lr.value)
            except Exception as e:
                raw = Record(lr.key, lr.value, lr.timestamp, lr.headers, topic, queue, lr.offset)
                self.ctx.handle_error(self.name, raw, e)
                continue
            out.append(Record(key, value, lr.timestamp, lr.headers, topic, queue, lr.offset))
        self.forward(out)

    def process(self, batch: Batch) -> None:
        self.forward(batch)


@register_processor("source")
class UserSourceProcessor(SourceProcessor):
    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert isinstance(factory.node, n.SourceNode)
        self.key_serde = factory.node.key_serde
        self.value_serde = factory.node.value_serde


@register_processor("shuffle-source")
class ShuffleSourceProcessor(SourceProcessor):
    key_serde = INTERNAL_SERDE
    value_serde = INTERNAL_SERDE
