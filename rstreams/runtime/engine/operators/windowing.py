"""Windowed aggregations and stream-stream joins on the embedded engine: adapters of
the semantics core (:mod:`rstreams.semantics.windows`, :mod:`rstreams.semantics.joins`),
which defines what windows, sessions and joins mean, over the task's store stack.

Stream time is the time lateness and closing are judged by: the watermark of the
shuffle producers feeding the task (``ctx.watermark``; see the watermarks module) when
there are several, so that records of several upstream queues interleaving after a
shuffle are not late and windows close whatever the queue count; otherwise, as in Kafka
Streams, the largest record timestamp the processor has seen. It only moves forward and
is kept in the task's store, so it survives restarts and rebalances.
"""

from __future__ import annotations

import logging
from typing import Any

from rstreams.dsl import nodes as n
from rstreams.planner.topology import ProcessorBuilder, ProcessorFactory, register_processor
from rstreams.runtime.engine.operators.aggregate import unstorable
from rstreams.runtime.engine.operators.batch import Batch
from rstreams.runtime.engine.operators.context import StreamContext
from rstreams.runtime.engine.operators.processors import FnProcessor, Processor
from rstreams.runtime.engine.operators.record import Record
from rstreams.runtime.engine.operators.watermarks import END
from rstreams.runtime.positions import record_positions, topic_base
from rstreams.semantics.aggregations import Aggregation
from rstreams.semantics.joins import JoinCore
from rstreams.semantics.nullkeys import NULL_KEYS
from rstreams.semantics.temporal import TemporalJoinCore
from rstreams.semantics.timing import NO_TIME, TimedCore
from rstreams.semantics.windows import WindowCore
from rstreams.state.stores import STREAM_TIME_KEY as _STREAM_TIME
from rstreams.windowed import Windowed

log = logging.getLogger("rstreams.windows")


#: The processor kinds defined here: kind -> builder (see ``operators.registry``).
BUILDERS: dict[str, ProcessorBuilder] = {}


class _Out:
    """Rows being emitted, with the input row each derives from."""

    __slots__ = ("keys", "offsets", "timestamps", "values")

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.timestamps: list[int] = []
        self.offsets: list[int] = []

    def add(self, key: Any, value: Any, ts: int, offset: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.timestamps.append(ts)
        self.offsets.append(offset)

    def batch(self, topic: str, queue: int) -> Batch:
        return Batch(topic, queue, self.keys, self.values, self.timestamps, self.offsets)


class _Pending:
    """Coalesced window results: the latest value per window, with the timestamp and
    source offset of the record it came from, until the next commit. Keyed by ``(key,
    start, end)``: the :class:`Windowed` keys are made once, when they go on."""

    __slots__ = ("born", "origin", "rows")

    def __init__(self) -> None:
        #: (key, start, end) -> (value, ts, offset)
        self.rows: dict[tuple[Any, int, int], tuple[Any, int, int]] = {}
        #: The windows whose first result is among the rows: none went on yet.
        self.born: set[tuple[Any, int, int]] = set()
        self.origin: tuple[str, int] | None = None

    def add(self, k: Any, start: int, end: int, v: Any, ts: int, off: int, new: bool) -> None:
        """The core's ``emit_window``. (A window emitted again moves to the end: rows
        keep the order of the last updates.) The None of a window born since the last
        commit drops its row: nothing downstream ever saw it (a session that grew
        longer, or merged into another, within a commit)."""
        rows = self.rows
        w = (k, start, end)
        if w in rows:
            del rows[w]
            if v is None and w in self.born:
                self.born.discard(w)
                return
        if new:
            self.born.add(w)
        rows[w] = (v, ts, off)

    def take(self, queue: int) -> Batch:
        rows, self.rows = self.rows, {}
        self.born = set()
        topic, q = self.origin or ("", queue)
        keys = [Windowed(k, s, e) for k, s, e in rows]
        values, timestamps, offsets = (list(c) for c in zip(*rows.values()))
        return Batch(topic, q, keys, values, timestamps, offsets)


class _TimedProcessor(Processor):
    """Runs a semantics core (``self.core``) over the task's store: keeps its stream
    time in the store and routes late records to ``late`` children."""

    store_name: str
    core: TimedCore

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        self.store = ctx.store(self.store_name)
        self._saved_time = self.store.get(_STREAM_TIME, NO_TIME)
        self.results = [c for c in self.children if c.kind != "late"]
        self.late_children = [c for c in self.children if c.kind == "late"]

    @property
    def max_time(self) -> int:
        """The largest timestamp the step has seen (a one-producer input raises it to
        the time its producer told: see the task's told inputs and the test driver)."""
        return self.core.max_time

    @max_time.setter
    def max_time(self, t: int) -> None:
        self.core.max_time = t

    def watermark(self) -> int | None:
        """The input watermark, None when the task's input carries none (then stream
        time is the largest timestamp seen)."""
        wm = self.ctx.watermark
        return None if wm >= END else wm

    def collect(self) -> _Out:
        """A fresh collector for the core's results."""
        out = _Out()
        self.core.emit = out.add
        return out

    def emit(self, out: _Out, batch: Batch | None = None) -> None:
        """Send ``out`` to the result children (time-driven output has no input batch)."""
        if out.keys:
            b = (
                out.batch("", self.ctx.queue)
                if batch is None
                else out.batch(batch.topic, batch.queue)
            )
            self.send_to(self.results, b)

    def emit_late(self, batch: Batch, idx: list[int]) -> None:
        if not idx:
            return
        self.ctx.metrics["late"] += len(idx)
        log.debug("%s: %d late record(s) at %s[%d]", self.name, len(idx), batch.topic, batch.queue)
        self.send_to(self.late_children, batch.take(idx))

    def on_watermark(self) -> None:
        """The input watermark moved: close and expire what its new stream time allows."""
        out = self.collect()
        if self.core.advance(self.watermark()):
            self.save_time()
            self.emit(out)

    def end_of_input(self) -> None:
        """Bounded input ended: what waits for more input comes out (see the core)."""
        out = self.collect()
        self.core.end_of_input()
        self.emit(out)

    def save_time(self) -> None:
        t = self.core.time
        if t != self._saved_time:
            self.store.put(_STREAM_TIME, t)
            self._saved_time = t


@register_processor("window-aggregate", BUILDERS)
class WindowAggregateProcessor(_TimedProcessor):
    """A windowed aggregation: :class:`~rstreams.semantics.windows.WindowCore`."""

    core: WindowCore

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        node = factory.node
        assert isinstance(node, n.WindowAggregateNode)
        self.node = node
        self.store_name = factory.stores[0]
        self.idle = node.close_after_idle

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        node = self.node
        self.core = WindowCore(
            Aggregation.of(node), node.window, node.emit, self.store, _Out().add,
            self._saved_time, self.idle,
        )  # fmt: skip
        self.store.explain_unstorable(unstorable(self.name, node))
        self.core.now = ctx.clock()
        self.core.restore()
        # As other aggregations: in update mode only each window's latest update per
        # commit goes on (a record updates one window, or a hopping window's several:
        # sent one by one, a window of 10 advancing 1 multiplied the sink's records by 10).
        self.coalesce = ctx.config.coalesce and node.emit == "update"
        self.pending = _Pending()
        if self.coalesce:
            self.core.emit_window = self.pending.add
        #: Each window's records of a batch folded together (see WindowCore.records):
        #: its updates go no further than the latest per commit, or out on close only.
        self.folds = not self.core.session and (self.coalesce or node.emit == "close")

    @property
    def holds(self) -> bool:
        return self.coalesce

    def held(self) -> int:
        return len(self.pending.rows)

    def emit(self, out: _Out, batch: Batch | None = None) -> None:
        # (Coalesced, the core's updates went to the pending rows: nothing comes here.)
        if not self.coalesce:
            super().emit(out, batch)
        elif batch is not None:
            self.pending.origin = (batch.topic, batch.queue)

    def flush(self) -> None:
        if self.pending.rows:
            self.send_to(self.results, self.pending.take(self.ctx.queue))

    def process(self, batch: Batch) -> None:
        # Skipped before stream time moves, as in Kafka Streams.
        batch = self.without_null_keys(batch)
        if not batch.values:
            return
        out = self.collect()
        late: list[int] = []
        core = self.core
        if self.idle is not None:
            core.now = self.ctx.clock()
        record, wm = core.record, self.watermark()
        if self.folds:

            def failed(i: int, e: Exception) -> None:
                self.ctx.handle_error(self.name, batch.row(i), e, self.node.fn)

            late = core.records(
                batch.keys, batch.values, batch.timestamps, batch.offsets, wm, failed
            )
        else:
            rows = zip(batch.keys, batch.values, batch.timestamps, batch.offsets)
            for i, (k, v, ts, off) in enumerate(rows):
                try:
                    if not record(k, v, ts, off, wm):
                        late.append(i)
                except Exception as e:
                    self.ctx.handle_error(self.name, batch.row(i), e, self.node.fn)
        self.save_time()
        self.emit(out, batch)
        self.emit_late(batch, late)

    def punctuate(self, now: int) -> None:
        """Wall-clock close of windows idle for ``close_after_idle`` ms."""
        if self.idle is None or not self.core.touched:
            return
        out = self.collect()
        self.core.close_idle(now)
        self.emit(out)


@register_processor("late", BUILDERS)
class LateProcessor(Processor):
    def process(self, batch: Batch) -> None:
        self.forward(batch)


# -- joins ----------------------------------------------------------------------------------


@register_processor("join-tag", BUILDERS)
class JoinTagProcessor(FnProcessor):
    """Keys a side's records by its join key and tags their values with the side."""

    def __init__(self, factory: ProcessorFactory) -> None:
        Processor.__init__(self, factory)
        node = factory.node
        assert isinstance(node, n.JoinNode)
        self.side = "L" if factory.options["side"] == "left" else "R"
        self.fn = node.left_key if self.side == "L" else node.right_key
        #: A temporal join's records carry their input position: (side, value, position).
        self.temporal = node.window is None
        self._bases: dict[str, int] = {}
        self.sources: tuple[str, ...] = factory.options.get("sources", ())

    def process(self, batch: Batch) -> None:
        keys, batch = self.apply(batch)
        side = self.side
        if self.temporal:
            base = self._bases.get(batch.topic)
            if base is None:
                base = self._bases[batch.topic] = topic_base(self.sources, batch.topic)
            pos = record_positions(batch.headers, base, batch.queue, batch.offsets)
            values: list[tuple[Any, ...]] = [(side, v, p) for v, p in zip(batch.values, pos)]
        else:
            values = [(side, v) for v in batch.values]
        self.forward(Batch(batch.topic, batch.queue, keys, values, batch.timestamps,
                           batch.offsets, batch.headers))  # fmt: skip


@register_processor("join", BUILDERS)
class JoinProcessor(_TimedProcessor):
    """Windowed join (buffers both sides within the window,
    :class:`~rstreams.semantics.joins.JoinCore`) or temporal join (both sides versioned
    by event time, :class:`~rstreams.semantics.temporal.TemporalJoinCore`)."""

    core: JoinCore | TemporalJoinCore

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        node = factory.node
        assert isinstance(node, n.JoinNode)
        self.node = node
        self.store_name = factory.stores[0]
        self.joiner = node.joiner
        self.factory_topic = ""  # (the join's input topic, once a batch came)

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        node = self.node
        if node.window is None:
            self.core = TemporalJoinCore(
                node.join_type, node.joiner, node.ttl, node.grace, self.store, _Out().add,
                self._saved_time, node.emits, self._failed_waiting,
            )  # fmt: skip
        else:
            self.core = JoinCore(
                node.join_type, node.joiner, node.window, self.store, _Out().add,
                self._saved_time,
            )  # fmt: skip
        self.core.restore()

    def _failed_waiting(self, e: Exception, k: Any, v: Any, ts: int, off: int) -> None:
        """A waiting record's joiner raised when stream time let it be answered: the
        on_error policy, for that record (its offset in the join's input queue)."""
        topic = self.factory_topic
        self.ctx.handle_error(
            self.name, Record(k, v, ts, (), topic, self.ctx.queue, off), e, self.joiner
        )

    def process(self, batch: Batch) -> None:
        out = self.collect()
        late: list[int] = []
        wm = self.watermark()
        self.factory_topic = batch.topic
        core = self.core
        if isinstance(core, TemporalJoinCore):
            # A temporal join's tag carries the record's position: (side, value, position).
            def failed(i: int, e: Exception) -> None:
                self.ctx.handle_error(self.name, batch.row(i), e, self.joiner)

            late, nulls = core.records(
                batch.keys, batch.values, batch.timestamps, batch.offsets, wm, failed
            )
            if nulls:
                self.ctx.metrics[NULL_KEYS] += nulls
            self._sizes()
            self.save_time()
            self.emit(out, batch)
            self.emit_late(batch, late)
            return
        record = self.core.record
        rows = zip(batch.keys, batch.values, batch.timestamps, batch.offsets)
        # A temporal join's tag carries the record's position: (side, value, position).
        for i, (k, tagged, ts, off) in enumerate(rows):
            if k is None:
                self.ctx.metrics[NULL_KEYS] += 1
            try:
                if not record(tagged[0], k, tagged[1], ts, off, wm, *tagged[2:]):
                    late.append(i)
            except Exception as e:
                self.ctx.handle_error(self.name, batch.row(i), e, self.joiner)
        if isinstance(self.core, TemporalJoinCore):
            self._sizes()
        self.save_time()
        self.emit(out, batch)
        self.emit_late(batch, late)

    def on_watermark(self) -> None:
        super().on_watermark()
        if isinstance(self.core, TemporalJoinCore):
            self._sizes()

    def _sizes(self) -> None:
        """The temporal join's state size, in the task's metrics (gauges, per task)."""
        sizes = self.core.sizes()  # type: ignore[union-attr]
        metrics = self.ctx.metrics
        metrics["join_versions"] = sizes["versions"]
        metrics["join_waiting"] = sizes["waiting"]
