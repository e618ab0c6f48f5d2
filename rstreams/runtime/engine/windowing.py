"""Windowed aggregations and stream-stream joins (Kafka Streams semantics).

Stream time is the time lateness and closing are judged by: the watermark of the
shuffle producers feeding the task (``ctx.watermark``; see the watermarks module) when
there are several, so that records of several upstream queues interleaving after a
shuffle are not late and windows close whatever the queue count; otherwise, as in Kafka
Streams, the largest record timestamp the processor has seen. It only moves forward and
is kept in the task's store, so it survives restarts and rebalances. A record updates a
window [start, end)
only if ``end > stream time - grace``; otherwise it is late. Windows whose
``end + grace`` (sessions: ``end + gap + grace``) stream time has reached are expired:
with ``emit="close"`` their final result is emitted first; either way their state is
deleted (a tombstone in the changelog), so state does not grow with time.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from typing import Any

from rstreams.dsl import nodes as n
from rstreams.dsl.windows import HoppingWindow, SessionWindow, TumblingWindow
from rstreams.planner.topology import ProcessorBuilder, ProcessorFactory, register_processor
from rstreams.runtime.engine.batch import Batch
from rstreams.runtime.engine.context import StreamContext
from rstreams.runtime.engine.processors import FnProcessor, Processor, _update_rule
from rstreams.runtime.engine.watermarks import END
from rstreams.runtime.nullkeys import NULL_KEYS, null_key_pair
from rstreams.state.stores import STREAM_TIME_KEY as _STREAM_TIME
from rstreams.windowed import Windowed

log = logging.getLogger("rstreams.windows")

_NO_TIME = -(2**62)

#: The processor kinds defined here: kind -> builder (see ``rstreams.runtime.engine.registry``).
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


def _merge_rule(node: n.WindowAggregateNode) -> Callable[[Any, Any], Any]:
    """How two sessions' aggregates combine."""
    if node.op in ("count", "sum"):
        return lambda a, b: a + b
    if node.op == "min":
        return min
    if node.op == "max":
        return max
    if node.op == "reduce":
        assert node.fn is not None
        return node.fn
    assert node.merger is not None
    return node.merger


class _TimedProcessor(Processor):
    """Keeps stream time in the store and routes late records to ``late`` children."""

    store_name: str

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        self.store = ctx.store(self.store_name)
        self.stream_time = self.store.get(_STREAM_TIME, _NO_TIME)
        self._saved_time = self.stream_time
        self.max_time = self.stream_time  # largest timestamp seen (restored: a bound)
        self.results = [c for c in self.children if c.kind != "late"]
        self.late_children = [c for c in self.children if c.kind == "late"]

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

    def advance(self) -> bool:
        """Stream time = the input watermark if the task's input carries one, else the
        largest timestamp seen; never backwards. True if it moved."""
        wm = self.ctx.watermark
        t = self.max_time if wm >= END else wm
        if t > self.stream_time:
            self.stream_time = t
            return True
        return False

    def on_watermark(self) -> None:
        """The input watermark moved: close and expire what its new stream time allows."""
        if self.advance():
            out = _Out()
            self._expire(out, -1)
            self.save_time()
            self.emit(out)

    def _expire(self, out: _Out, off: int) -> None:
        raise NotImplementedError

    def save_time(self) -> None:
        if self.stream_time != self._saved_time:
            self.store.put(_STREAM_TIME, self.stream_time)
            self._saved_time = self.stream_time


@register_processor("window-aggregate", BUILDERS)
class WindowAggregateProcessor(_TimedProcessor):
    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        node = factory.node
        assert isinstance(node, n.WindowAggregateNode)
        self.node = node
        self.store_name = factory.stores[0]
        self.spec = node.window
        self.grace = node.window.grace
        self.session = isinstance(node.window, SessionWindow)
        self.update = _update_rule(node)  # type: ignore[arg-type]
        # Only sessions merge (aggregate() has a merger only there).
        self.merge = _merge_rule(node) if self.session else None
        self.emit_close = node.emit == "close"
        self.idle = node.close_after_idle

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        # The in-memory indexes, built from the restored store only (every window in it
        # is open: a closed one was deleted). A restored window's idle clock starts now.
        self.heap: list[tuple[int, Any, int]] = []  # (close time, key, start)
        self.sessions: dict[Any, dict[int, int]] = {}  # key -> {start: end}
        self.touched: dict[tuple[Any, int], int] = {}  # (key, start) -> wall ms of update
        now = ctx.clock()
        for skey, value in self.store.items():
            if skey == _STREAM_TIME:
                continue
            _, key, start = skey
            end = value[0] if self.session else self._end(start)
            self._track(key, start, end, now)

    def _end(self, start: int) -> int:
        return start + self.spec.size

    def _close_time(self, end: int) -> int:
        return end + self.grace + (self.spec.gap if self.session else 0)

    def _track(self, key: Any, start: int, end: int, now: int) -> None:
        heapq.heappush(self.heap, (self._close_time(end), _Key(key), start))
        if self.session:
            self.sessions.setdefault(key, {})[start] = end
        if self.idle is not None:
            self.touched[(key, start)] = now

    def process(self, batch: Batch) -> None:
        # Skipped before stream time moves, as in Kafka Streams.
        batch = self.without_null_keys(batch)
        if not batch.values:
            return
        out = _Out()
        late: list[int] = []
        now = self.ctx.clock() if self.idle is not None else 0
        rows = zip(batch.keys, batch.values, batch.timestamps, batch.offsets)
        for i, (k, v, ts, off) in enumerate(rows):
            if ts > self.max_time:
                self.max_time = ts
                self.advance()
            try:
                ok = (self._session if self.session else self._windows)(k, v, ts, off, out, now)
            except Exception as e:
                self.ctx.handle_error(self.name, batch.row(i), e, self.node.fn)
                continue
            if not ok:
                late.append(i)
            self._expire(out, off)
        self.save_time()
        self.emit(out, batch)
        self.emit_late(batch, late)

    def _windows(self, k: Any, v: Any, ts: int, off: int, out: _Out, now: int) -> bool:
        assert isinstance(self.spec, (TumblingWindow, HoppingWindow))
        live = [(s, e) for s, e in self.spec.windows_for(ts) if e > self.stream_time - self.grace]
        for s, e in live:
            skey = ("w", k, s)
            # Stored: (aggregate, largest timestamp of the window's records), the value
            # and timestamp of Kafka Streams' timestamped window store; every result of
            # the window carries that timestamp.
            old = self.store.get(skey)
            new = self.update(None if old is None else old[0], v)
            top = ts if old is None else max(ts, old[1])
            self.store.put(skey, None if new is None else (new, top))
            if old is None:
                self._track(k, s, e, now)
            elif self.idle is not None:
                self.touched[(k, s)] = now
            if not self.emit_close:
                out.add(Windowed(k, s, e), new, top, off)
        return bool(live)

    def _session(self, k: Any, v: Any, ts: int, off: int, out: _Out, now: int) -> bool:
        assert isinstance(self.spec, SessionWindow)
        gap = self.spec.gap
        mine = self.sessions.get(k, {})
        overlapping = sorted((s, e) for s, e in mine.items() if s - gap <= ts <= e + gap)
        start = min([ts, *(s for s, _ in overlapping)])
        end = max([ts, *(e for _, e in overlapping)])
        if end < self.stream_time - self.grace:
            return False
        agg = self.update(None, v)
        merge = self.merge
        assert merge is not None
        for s, e in overlapping:
            old = self.store.get(("s", k, s))
            agg = merge(old[1], agg)
            self.store.delete(("s", k, s))
            del mine[s]
            self.touched.pop((k, s), None)
            if not self.emit_close and (s, e) != (start, end):
                out.add(Windowed(k, s, e), None, e, off)  # the merged-away session
        self.store.put(("s", k, start), (end, agg))
        self._track(k, start, end, now)
        if not self.emit_close:
            # A session's end is its largest record timestamp: results carry it.
            out.add(Windowed(k, start, end), agg, end, off)
        return True

    def _expire(self, out: _Out, off: int) -> None:
        heap = self.heap
        while heap and heap[0][0] <= self.stream_time:
            _, wk, start = heapq.heappop(heap)
            self._close(wk.key, start, out, off, "event-time")

    def _close(self, key: Any, start: int, out: _Out, off: int, why: str) -> None:
        skey = ("s" if self.session else "w", key, start)
        value = self.store.get(skey)
        if value is None:
            return  # merged away or closed already (the heap is lazily cleaned)
        if self.session:
            end, agg = value
            if why == "event-time" and self._close_time(end) > self.stream_time:
                return  # extended since: a later heap entry closes it
            self.sessions.get(key, {}).pop(start, None)
            top = end
        else:
            end, (agg, top) = self._end(start), value
        if self.emit_close:
            out.add(Windowed(key, start, end, closed=why), agg, top, off)
        self.store.delete(skey)
        self.touched.pop((key, start), None)

    def end_of_input(self) -> None:
        """Bounded input ended: with emit="close", close every open window (results say
        "end-of-input"). In update mode every result is out already and the state stays,
        so a later run over more input continues the windows."""
        if not self.emit_close:
            return
        out = _Out()
        while self.heap:
            _, wk, start = heapq.heappop(self.heap)
            self._close(wk.key, start, out, -1, "end-of-input")
        self.emit(out)

    def punctuate(self, now: int) -> None:
        """Wall-clock close of windows idle for ``close_after_idle`` ms."""
        if self.idle is None or not self.touched:
            return
        out = _Out()
        for (key, start), at in list(self.touched.items()):
            if now - at >= self.idle:
                self._close(key, start, out, -1, "idle")
        self.emit(out)


class _Key:
    """Heap entries compare by time, then start; keys themselves may not be orderable."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __lt__(self, other: _Key) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


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

    def process(self, batch: Batch) -> None:
        keys, batch = self.apply(batch)
        side = self.side
        self.forward(Batch(batch.topic, batch.queue, keys, [(side, v) for v in batch.values],
                           batch.timestamps, batch.offsets, batch.headers))  # fmt: skip


@register_processor("join", BUILDERS)
class JoinProcessor(_TimedProcessor):
    """Windowed join (buffers both sides within the window) or table join (latest value
    per key and side, expired after ``ttl`` of stream time)."""

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        node = factory.node
        assert isinstance(node, n.JoinNode)
        self.node = node
        self.store_name = factory.stores[0]
        self.joiner = node.joiner
        self.window = node.window
        self.outer_left = node.join_type in ("left", "outer")
        self.outer_right = node.join_type == "outer"
        self.grace = node.window.grace if node.window is not None else 0

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        # Expiry heap and (windowed) buffers, built from the restored store only.
        self.heap: list[tuple[int, str, Any, int, int]] = []
        # windowed: (side, key) -> {(ts, seq): [value, matched]}
        self.buffers: dict[tuple[str, Any], dict[tuple[int, int], list[Any]]] = {}
        for skey, value in self.store.items():
            if skey == _STREAM_TIME:
                continue
            if self.window is not None:
                _, side, key, ts, seq = skey
                self.buffers.setdefault((side, key), {})[(ts, seq)] = list(value)
                heapq.heappush(self.heap, (self._expiry(side, ts), side, _Key(key), ts, seq))
            else:
                _, side, key = skey
                heapq.heappush(
                    self.heap, (value[1] + (self.node.ttl or 0), side, _Key(key), value[1], 0)
                )

    def _expiry(self, side: str, ts: int) -> int:
        # Both sides stay buffered for before + after + grace: any record that can still
        # match a buffered one is not late yet (and an unmatched record is emitted only
        # when nothing can match it any more).
        w = self.window
        return ts + w.before + w.after + w.grace + 1

    def _late(self, side: str, ts: int) -> bool:
        w = self.window
        return ts + (w.after if side == "L" else w.before) + w.grace < self.stream_time

    def process(self, batch: Batch) -> None:
        out = _Out()
        late: list[int] = []
        rows = zip(batch.keys, batch.values, batch.timestamps, batch.offsets)
        for i, (k, tagged, ts, off) in enumerate(rows):
            side, v = tagged
            if ts > self.max_time:
                self.max_time = ts
                self.advance()
            try:
                if k is None:
                    self._null_key(side, v, ts, off, out)
                elif self.window is None:
                    self._table(side, k, v, ts, off, out)
                elif not self._windowed(side, k, v, ts, off, out):
                    late.append(i)
            except Exception as e:
                self.ctx.handle_error(self.name, batch.row(i), e, self.joiner)
                continue
            self._expire(out, off)
        self.save_time()
        self.emit(out, batch)
        self.emit_late(batch, late)

    def _null_key(self, side: str, v: Any, ts: int, off: int, out: _Out) -> None:
        """A None join key matches nothing: never buffered; unmatched at once on a
        left/outer side, else dropped."""
        self.ctx.metrics[NULL_KEYS] += 1
        pair = null_key_pair(self.node.join_type, side, v)
        if pair is not None:
            out.add(None, self.joiner(*pair), ts, off)

    def _windowed(self, side: str, k: Any, v: Any, ts: int, off: int, out: _Out) -> bool:
        """Join one record; False if it is late (joined all the same, not buffered)."""
        w = self.window
        other = "R" if side == "L" else "L"
        lo, hi = (ts - w.before, ts + w.after) if side == "L" else (ts - w.after, ts + w.before)
        matched = False
        for (ots, oseq), entry in sorted(self.buffers.get((other, k), {}).items()):
            if lo <= ots <= hi:
                left, right = (v, entry[0]) if side == "L" else (entry[0], v)
                out.add(k, self.joiner(left, right), max(ts, ots), off)
                matched = True
                if not entry[1]:
                    entry[1] = True
                    self.store.put(("j", other, k, ots, oseq), (entry[0], True))
        if self._late(side, ts):
            # As in Kafka Streams: a late record still joins what the other side retains
            # but is not buffered (its window store drops it as expired), so nothing
            # joins it later: unmatched on a left/outer side, it comes out at once.
            if not matched and (self.outer_left if side == "L" else self.outer_right):
                pair = (v, None) if side == "L" else (None, v)
                out.add(k, self.joiner(*pair), ts, off)
            return False
        seq = off
        self.buffers.setdefault((side, k), {})[(ts, seq)] = [v, matched]
        self.store.put(("j", side, k, ts, seq), (v, matched))
        heapq.heappush(self.heap, (self._expiry(side, ts), side, _Key(k), ts, seq))
        return True

    def _table(self, side: str, k: Any, v: Any, ts: int, off: int, out: _Out) -> None:
        other = "R" if side == "L" else "L"
        self.store.put(("j", side, k), (v, ts))
        heapq.heappush(self.heap, (ts + (self.node.ttl or 0), side, _Key(k), ts, 0))
        found = self.store.get(("j", other, k))
        ov = None if found is None else found[0]
        left, right = (v, ov) if side == "L" else (ov, v)
        if (
            found is not None
            or (side == "L" and self.outer_left)
            or (side == "R" and self.outer_right)
        ):
            out.add(k, self.joiner(left, right), ts, off)

    def end_of_input(self) -> None:
        """Bounded input ended: nothing can match any more; emit the unmatched."""
        out = _Out()
        self._expire(out, -1, everything=True)
        self.emit(out)

    def _expire(self, out: _Out, off: int, everything: bool = False) -> None:
        heap = self.heap
        while heap and (everything or heap[0][0] <= self.stream_time):
            _, side, wk, ts, seq = heapq.heappop(heap)
            k = wk.key
            if self.window is None:
                found = self.store.get(("j", side, k))
                if found is not None and found[1] == ts:  # not overwritten since
                    self.store.delete(("j", side, k))
                continue
            entries = self.buffers.get((side, k), {})
            entry = entries.pop((ts, seq), None)
            if entry is None:
                continue
            if not entries:
                self.buffers.pop((side, k), None)
            self.store.delete(("j", side, k, ts, seq))
            if not entry[1] and (self.outer_left if side == "L" else self.outer_right):
                pair = (entry[0], None) if side == "L" else (None, entry[0])
                out.add(k, self.joiner(*pair), ts, off)
