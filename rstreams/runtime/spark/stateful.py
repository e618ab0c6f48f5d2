"""Windows, sessions, ``.late()`` and joins on Structured Streaming: the embedded
engine's window and join processors, replayed per queue on Spark's RocksDB state store.

**Why per queue.** On the embedded engine a window or join processor runs once per queue
of its shuffle topic (``mmh3(msgpack(key)) % queues``, with the planner's queue count)
and judges lateness, window closing and join expiry against that queue's *stream time*,
the largest timestamp it has seen. Stream time is shared by all keys of a queue: a
record of one key closes the windows of another. A Spark operator keyed by the record
key could not replay that, and Spark's own session windows and stream-stream joins
judge by one watermark per query and emit in append mode only once it has passed, so a
bounded run would lose its last sessions and its unmatched outer-join records. Here
each record goes to the embedded engine's queue (column ``_q``), and
``applyInPandasWithState`` grouped by queue runs, per queue and micro-batch, the
queue's records in source order (``_o``) through :class:`WindowQueue` or
:class:`JoinQueue`: the logic of ``WindowAggregateProcessor`` and ``JoinProcessor``
(``rstreams/runtime/engine/windowing.py``; the two backends do not import each other,
so it is restated here, and the tests compare both on the same input). Window
assignment, session merging, both emit modes (``Windowed.closed`` included), lateness
and ``.late()``, join buffering within the JoinWindow (a late join record is joined
but not buffered), table joins with ``ttl`` and the unmatched results of left/outer
joins are therefore the embedded engine's, record for record. Every result carries the
``_o`` of the record that caused it (plus its position among that record's results), so
"last value per key" and downstream order are too. Results carry no event time on this
backend (see ``windows.py``), so the embedded results' timestamps (a window's largest
record timestamp, a join's later one) are not replayed.

**State.** A queue's state (stream time, open windows or buffered join records, the
expiry heap, the join's record counter) is one msgpack value in the RocksDB state store
(``applyInPandasWithState`` keeps one state row per group), read and rewritten by each
micro-batch that has records for the queue. Aggregates are stored with the internal
msgpack serde, which keeps their types (a step's ``state_serde`` is not used, as for
streaming reduce/aggregate). Expiry bounds the state as on the embedded engine; a step
with very many open windows per queue should get more queues (``queues=``).

**End of input.** The embedded engine treats the end of bounded input as an infinite
watermark: close-mode windows close (``closed="end-of-input"``) and left/outer joins
emit their unmatched records. A bounded streaming run (``availableNow``) does the same:
:func:`prepare_end_of_input` writes a marker file into ``<checkpoint>/_end-of-input/``
before the queries start; that directory is a second file source of every query with
such a step, and its rows go to every queue, ordered after all records. Spark reads all
files available at the start of an ``availableNow`` run in one micro-batch (rstreams
sets no per-trigger file limit), so each queue runs ``end_of_input`` after the run's
last record. A continuous run (``trigger_once=False``) writes no marker: windows close
and join records expire by stream time only, as on unbounded embedded input. The state
that outlives an end of input is the embedded engine's too (update-mode windows and
stream time stay, so a later run continues them; join buffers are emptied).
"""

from __future__ import annotations

import heapq
import operator
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.dsl.windows import HoppingWindow, SessionWindow, TumblingWindow
from rstreams.errors import UnsupportedOperation
from rstreams.semantics.nullkeys import null_key_pair
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.compiler import Compiler, Stream
from rstreams.runtime.spark.segments import ErrorPolicy, update_rule
from rstreams.runtime.spark.tables import is_local, local_path, write_bytes_atomically
from rstreams.runtime.spark.timed import timed_frame
from rstreams.windowed import Windowed

#: Directory (under the checkpoint) of the end-of-input markers of bounded runs.
MARKERS = "_end-of-input"
#: Ordering-key prefix of what a queue emits at the end of input (after every record).
_AT_END = b"\xff\xff"
_NO_TIME = -(2**62)
#: ``_s``: the side of a record (windows use LEFT), or an end-of-input marker.
LEFT, RIGHT, END = 0, 1, 2

_ROUTED = "k_m binary, _t bigint, v_m binary, _o binary, _s int, _q int"
OUTPUT = "k_m binary, v_m binary, _o binary, _late boolean"
STATE = "state binary"


def uses_markers(pipeline: n.Pipeline) -> bool:
    """Does a streaming run of ``pipeline`` replay windows or joins (and so read the
    end-of-input markers)?"""
    return any(isinstance(x, (n.WindowAggregateNode, n.JoinNode)) for x in pipeline.nodes)


def prepare_end_of_input(spark: SparkSession, directory: str, bounded: bool) -> None:
    """Create the marker directory (a file source must exist) and, for a bounded run,
    write a new marker in it."""
    if bounded:
        name = f"{time.time_ns():020d}-{os.getpid()}.txt"
        write_bytes_atomically(spark, b"end of input\n", f"{directory.rstrip('/')}/{name}")
    elif is_local(directory):
        os.makedirs(local_path(directory), exist_ok=True)
    else:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(directory)
        path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).mkdirs(path)


def is_marker_source(description: str) -> bool:
    """Is a streaming source (by its progress description) the marker directory?"""
    return f"/{MARKERS}" in description


# -- translation --------------------------------------------------------------------------------


def window_aggregate(node: n.WindowAggregateNode, comp: Compiler) -> Stream:
    """The results of a windowed aggregation (every update, or one per closed window)."""
    df = _window_frame(node, comp).where(~F.col("_late"))
    return _stream(df)


def late(node: n.LateNode, comp: Compiler) -> Stream:
    """The records too late for every window of the window step before ``node``."""
    window = node.parents[0]
    assert isinstance(window, n.WindowAggregateNode)
    return _stream(_window_frame(window, comp).where(F.col("_late")))


def join(node: n.JoinNode, comp: Compiler) -> Stream:
    """Windowed and table joins, inner/left/outer."""
    queues = queue_count(comp, node)
    left = timed_frame(comp, node.parents[0], node, True, enc.PACKED, node.left_key)
    right = timed_frame(comp, node.parents[1], node, True, enc.PACKED, node.right_key)
    for s in (left, right):
        _check_single_stateful(node, s)
    rows = _route(left.df, queues, LEFT).unionByName(_route(right.df, queues, RIGHT))
    rows = rows.unionByName(_markers(comp, queues))
    return _stream(_apply(rows, Replay(JoinSpec.of(node), comp.policy(left))))


def _window_frame(node: n.WindowAggregateNode, comp: Compiler) -> DataFrame:
    s = timed_frame(comp, node.parents[0], node, True, enc.PACKED)
    _check_single_stateful(node, s)
    queues = queue_count(comp, node)
    rows = _route(s.df, queues, LEFT).unionByName(_markers(comp, queues))
    return _apply(rows, Replay(WindowSpec.of(node), comp.policy(s)))


def _stream(df: DataFrame) -> Stream:
    return Stream(
        df.select("k_m", "v_m", enc.ORDER),
        enc.PACKED,
        enc.PACKED,
        ordered=True,
        after_agg=True,  # a stateful operator: update output mode, nothing stateful after
        python=True,
    )


def _check_single_stateful(node: n.Node, s: Stream) -> None:
    if s.after_agg:
        raise UnsupportedOperation(
            f"step {node.name!r} ({node.kind}) reads the output of another stateful step; "
            "Spark Structured Streaming runs one stateful step per query here (run it in "
            "batch mode, or sink the first step's output to a topic and read that)"
        )


def _apply(rows: DataFrame, replay: Replay) -> DataFrame:
    from pyspark.sql.streaming.state import GroupStateTimeout

    return rows.groupBy("_q").applyInPandasWithState(
        replay, OUTPUT, STATE, "Update", GroupStateTimeout.NoTimeout
    )


def queue_count(comp: Compiler, node: n.Node) -> int:
    """The queue count of ``node``'s store on the embedded engine (the planner's)."""
    from rstreams.planner.compiler import compile_pipeline

    stores = compile_pipeline(comp.pipeline).stores.values()
    spec = next(s for s in stores if s.processor == node.name)
    return spec.queues or 1  # a source topic of unknown size: one queue, as in tests


def _route(df: DataFrame, queues: int, side: int) -> DataFrame:
    r = _Route(queues, side)
    return df.select("k_m", "_t", "v_m", enc.ORDER).mapInArrow(r, _ROUTED)


def _markers(comp: Compiler, queues: int) -> DataFrame:
    """One end-of-input row per queue and marker file."""
    if comp.markers is None:
        raise AssertionError("run_streaming sets the end-of-input directory before compiling")
    return comp.spark.readStream.text(comp.markers).select(
        F.lit(None).cast("binary").alias("k_m"),
        F.lit(0).cast("bigint").alias("_t"),
        F.lit(None).cast("binary").alias("v_m"),
        F.lit(_AT_END).alias(enc.ORDER),
        F.lit(END).alias("_s"),
        F.explode(F.sequence(F.lit(0), F.lit(queues - 1))).alias("_q"),
    )


@attrs.frozen
class _Route:
    """mapInArrow: adds the side ``_s`` and the queue ``_q`` of each record's packed key,
    as the embedded shuffle sink picks it (the default modulo queue mapper)."""

    queues: int
    side: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from rstreams.runtime.queues.mapper import ModuloQueueMapper

        mapper = ModuloQueueMapper()
        for rb in batches:
            queue = mapper.queues_for(rb.column(0).to_pylist(), self.queues)
            side = pa.array([self.side] * rb.num_rows, pa.int32())
            yield pa.RecordBatch.from_arrays(
                [*rb.columns, side, pa.array(queue, pa.int32())],
                names=["k_m", "_t", "v_m", enc.ORDER, "_s", "_q"],
            )


# -- what a queue replays ---------------------------------------------------------------------


@attrs.frozen
class WindowSpec:
    """A window step, as its replay needs it (without the graph above it)."""

    name: str
    op: str
    window: Any
    emit: str
    fn: Any = None
    initializer: Any = None
    merger: Any = None

    @classmethod
    def of(cls, node: n.WindowAggregateNode) -> WindowSpec:
        return cls(
            node.name, node.op, node.window, node.emit, node.fn, node.initializer, node.merger
        )


@attrs.frozen
class JoinSpec:
    """A join step, as its replay needs it."""

    name: str
    join_type: str
    joiner: Any
    window: Any = None
    ttl: int | None = None

    @classmethod
    def of(cls, node: n.JoinNode) -> JoinSpec:
        return cls(node.name, node.join_type, node.joiner, node.window, node.ttl)


class _Key:
    """Heap entries compare by time, then start; keys themselves may not be orderable
    (the embedded engine's heap entries, exactly, so equal times pop in the same order)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __lt__(self, other: _Key) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


#: ``emit(key, value)``: a result of the record being replayed.
Emit = Callable[[Any, Any], None]


def _window_update(spec: WindowSpec) -> Callable[[Any, Any], Any]:
    """new = update(old or None, value): the embedded ``_update_rule`` over raw values."""
    rule = update_rule(spec.op, spec.fn, spec.initializer)
    fn = spec.fn
    if spec.op in ("sum", "min", "max") and fn is not None:
        return lambda old, v: rule(old, fn(v))
    return rule


def _session_merge(spec: WindowSpec) -> Callable[[Any, Any], Any]:
    """How two sessions' aggregates combine (the embedded ``_merge_rule``)."""
    if spec.op in ("count", "sum"):
        return operator.add
    if spec.op in ("min", "max"):
        return min if spec.op == "min" else max
    fn = spec.fn if spec.op == "reduce" else spec.merger
    assert fn is not None
    return fn


class WindowQueue:
    """One queue of a window step: ``WindowAggregateProcessor`` on plain data.

    ``store`` maps ``(key, start)`` to the aggregate (tumbling/hopping) or to
    ``(end, aggregate)`` (sessions); ``heap`` holds ``(close time, key, start)``,
    cleaned lazily as on the embedded engine.
    """

    def __init__(self, spec: WindowSpec, saved: dict[str, Any] | None) -> None:
        self.spec = spec
        window = spec.window
        self.session = isinstance(window, SessionWindow)
        self.grace = window.grace
        self.gap = window.gap if self.session else 0
        self.size = 0 if self.session else window.size
        self.emit_close = spec.emit == "close"
        self.update = _window_update(spec)
        self.merge = _session_merge(spec) if self.session else None
        self.time = _NO_TIME
        self.store: dict[tuple[Any, int], Any] = {}
        self.sessions: dict[Any, dict[int, int]] = {}
        self.heap: list[tuple[int, _Key, int]] = []
        if saved is not None:
            self._load(saved)

    # -- state ------------------------------------------------------------------------

    def _load(self, saved: dict[str, Any]) -> None:
        self.time = saved["t"]
        for k, s, e, agg in saved["w"]:
            if self.session:
                self.store[(k, s)] = (e, agg)
                self.sessions.setdefault(k, {})[s] = e
            else:
                self.store[(k, s)] = agg
        self.heap = [(c, _Key(k), s) for c, k, s in saved["h"]]

    def save(self) -> dict[str, Any]:
        rows = []
        for (k, s), value in self.store.items():
            if value is None:
                continue  # a None aggregate is an absent one (the embedded store's get)
            e, agg = value if self.session else (s + self.size, value)
            rows.append([k, s, e, agg])
        heap = [[c, wk.key, s] for c, wk, s in self.heap]
        return {"t": self.time, "w": rows, "h": heap}

    # -- records ----------------------------------------------------------------------

    def record(self, side: int, k: Any, v: Any, ts: int, emit: Emit) -> bool | None:
        """Replay one record: True if it counted, False if it was late, None if the
        update failed (reported by the caller; no expiry then, as on the engine)."""
        if ts > self.time:
            self.time = ts
        ok = self._session(k, v, ts, emit) if self.session else self._windows(k, v, ts, emit)
        self._expire(emit)
        return ok

    def _get(self, key: tuple[Any, int]) -> Any:
        return self.store.get(key)

    def _track(self, key: Any, start: int, end: int) -> None:
        close = end + self.grace + self.gap
        heapq.heappush(self.heap, (close, _Key(key), start))
        if self.session:
            self.sessions.setdefault(key, {})[start] = end

    def _windows(self, k: Any, v: Any, ts: int, emit: Emit) -> bool:
        window = self.spec.window
        assert isinstance(window, (TumblingWindow, HoppingWindow))
        live = [(s, e) for s, e in window.windows_for(ts) if e > self.time - self.grace]
        for s, e in live:
            old = self._get((k, s))
            new = self.update(old, v)
            self.store[(k, s)] = new
            if old is None:
                self._track(k, s, e)
            if not self.emit_close:
                emit(Windowed(k, s, e), new)
        return bool(live)

    def _session(self, k: Any, v: Any, ts: int, emit: Emit) -> bool:
        gap = self.gap
        mine = self.sessions.get(k, {})
        overlapping = sorted((s, e) for s, e in mine.items() if s - gap <= ts <= e + gap)
        start = min([ts, *(s for s, _ in overlapping)])
        end = max([ts, *(e for _, e in overlapping)])
        if end < self.time - self.grace:
            return False
        agg = self.update(None, v)
        assert self.merge is not None
        for s, e in overlapping:
            agg = self.merge(self.store[(k, s)][1], agg)
            del self.store[(k, s)]
            del mine[s]
            if not self.emit_close and (s, e) != (start, end):
                emit(Windowed(k, s, e), None)  # the merged-away session
        self.store[(k, start)] = (end, agg)
        self._track(k, start, end)
        if not self.emit_close:
            emit(Windowed(k, start, end), agg)
        return True

    def _expire(self, emit: Emit) -> None:
        heap = self.heap
        while heap and heap[0][0] <= self.time:
            _, wk, start = heapq.heappop(heap)
            self._close(wk.key, start, emit, "event-time")

    def _close(self, key: Any, start: int, emit: Emit, why: str) -> None:
        value = self._get((key, start))
        if value is None:
            return  # merged away or closed already (the heap is cleaned lazily)
        if self.session:
            end, agg = value
            if why == "event-time" and end + self.grace + self.gap > self.time:
                return  # extended since: a later heap entry closes it
            self.sessions.get(key, {}).pop(start, None)
        else:
            end, agg = start + self.size, value
        if self.emit_close:
            emit(Windowed(key, start, end, closed=why), agg)
        del self.store[(key, start)]

    def end_of_input(self, emit: Emit) -> None:
        """Close every open window (close mode); update mode keeps them for more input."""
        if not self.emit_close:
            return
        while self.heap:
            _, wk, start = heapq.heappop(self.heap)
            self._close(wk.key, start, emit, "end-of-input")


class JoinQueue:
    """One queue of a join step: ``JoinProcessor`` on plain data.

    Windowed: ``buffers[(side, key)][(ts, seq)] = [value, matched]`` with ``seq`` the
    record's offset in the queue (a counter kept in the state, as the shuffle topic's
    offsets are). Table join: ``table[(side, key)] = (value, ts)``. ``heap`` holds
    ``(expiry, side, key, ts, seq)``.
    """

    def __init__(self, spec: JoinSpec, saved: dict[str, Any] | None) -> None:
        self.spec = spec
        self.joiner = spec.joiner
        self.window = spec.window
        self.outer_left = spec.join_type in ("left", "outer")
        self.outer_right = spec.join_type == "outer"
        self.time = _NO_TIME
        self.offset = 0
        self.buffers: dict[tuple[str, Any], dict[tuple[int, int], list[Any]]] = {}
        self.table: dict[tuple[str, Any], tuple[Any, int]] = {}
        self.heap: list[tuple[int, str, _Key, int, int]] = []
        if saved is not None:
            self.time, self.offset = saved["t"], saved["n"]
            for side, k, ts, seq, v, matched in saved["j"]:
                if self.window is not None:
                    self.buffers.setdefault((side, k), {})[(ts, seq)] = [v, matched]
                else:
                    self.table[(side, k)] = (v, ts)
            self.heap = [(x, side, _Key(k), ts, seq) for x, side, k, ts, seq in saved["h"]]

    def save(self) -> dict[str, Any]:
        rows: list[list[Any]] = []
        for (side, k), entries in self.buffers.items():
            rows += [[side, k, ts, seq, v, m] for (ts, seq), (v, m) in entries.items()]
        rows += [[side, k, ts, 0, v, False] for (side, k), (v, ts) in self.table.items()]
        heap = [[x, side, wk.key, ts, seq] for x, side, wk, ts, seq in self.heap]
        return {"t": self.time, "n": self.offset, "j": rows, "h": heap}

    def record(self, side_no: int, k: Any, v: Any, ts: int, emit: Emit) -> bool | None:
        side = "L" if side_no == LEFT else "R"
        off = self.offset
        self.offset += 1
        if ts > self.time:
            self.time = ts
        if k is None:
            pair = null_key_pair(self.spec.join_type, side, v)
            if pair is not None:
                emit(k, self.joiner(*pair))
            ok = True
        elif self.window is None:
            self._table(side, k, v, ts, emit)
            ok = True
        else:
            ok = self._windowed(side, k, v, ts, off, emit)
        self._expire(emit)
        return ok

    def _late(self, side: str, ts: int) -> bool:
        w = self.window
        return bool(ts + (w.after if side == "L" else w.before) + w.grace < self.time)

    def _expiry(self, ts: int) -> int:
        # Both sides stay buffered for before + after + grace (see the embedded engine).
        w = self.window
        return int(ts + w.before + w.after + w.grace + 1)

    def _windowed(self, side: str, k: Any, v: Any, ts: int, off: int, emit: Emit) -> bool:
        w = self.window
        other = "R" if side == "L" else "L"
        lo, hi = (ts - w.before, ts + w.after) if side == "L" else (ts - w.after, ts + w.before)
        matched = False
        for (ots, _), entry in sorted(self.buffers.get((other, k), {}).items()):
            if lo <= ots <= hi:
                left, right = (v, entry[0]) if side == "L" else (entry[0], v)
                emit(k, self.joiner(left, right))
                matched = True
                entry[1] = True
        if self._late(side, ts):
            # Joined with what the other side retains, not buffered; unmatched on a
            # left/outer side, it comes out at once (see the embedded engine).
            if not matched and (self.outer_left if side == "L" else self.outer_right):
                emit(k, self.joiner(*((v, None) if side == "L" else (None, v))))
            return False
        self.buffers.setdefault((side, k), {})[(ts, off)] = [v, matched]
        heapq.heappush(self.heap, (self._expiry(ts), side, _Key(k), ts, off))
        return True

    def _table(self, side: str, k: Any, v: Any, ts: int, emit: Emit) -> None:
        other = "R" if side == "L" else "L"
        self.table[(side, k)] = (v, ts)
        heapq.heappush(self.heap, (ts + (self.spec.ttl or 0), side, _Key(k), ts, 0))
        found = self.table.get((other, k))
        ov = None if found is None else found[0]
        left, right = (v, ov) if side == "L" else (ov, v)
        if found is not None or (self.outer_left if side == "L" else self.outer_right):
            emit(k, self.joiner(left, right))

    def _expire(self, emit: Emit, everything: bool = False) -> None:
        heap = self.heap
        while heap and (everything or heap[0][0] <= self.time):
            _, side, wk, ts, seq = heapq.heappop(heap)
            k = wk.key
            if self.window is None:
                found = self.table.get((side, k))
                if found is not None and found[1] == ts:  # not overwritten since
                    del self.table[(side, k)]
                continue
            entries = self.buffers.get((side, k), {})
            entry = entries.pop((ts, seq), None)
            if entry is None:
                continue
            if not entries:
                self.buffers.pop((side, k), None)
            if not entry[1] and (self.outer_left if side == "L" else self.outer_right):
                pair = (entry[0], None) if side == "L" else (None, entry[0])
                emit(k, self.joiner(*pair))

    def end_of_input(self, emit: Emit) -> None:
        """Nothing can match any more: emit the unmatched, empty the buffers."""
        self._expire(emit, everything=True)


@attrs.frozen
class Replay:
    """The function given to ``applyInPandasWithState``, grouped by queue ``_q``.

    Sorts the queue's rows of the micro-batch by ``(_o, _s)`` (end-of-input markers
    last), replays them through a :class:`WindowQueue` or :class:`JoinQueue` restored
    from the queue's state, and returns every result (``_late`` false) and late record
    (``_late`` true; windows only) with its ordering key.
    """

    spec: WindowSpec | JoinSpec
    policy: ErrorPolicy

    def __call__(self, key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        from rstreams.serde import INTERNAL_SERDE

        pack, unpack = INTERNAL_SERDE.serialize, INTERNAL_SERDE.deserialize
        frames = [p for p in pdfs if len(p)]
        if not frames:
            return
        df = pd.concat(frames) if len(frames) > 1 else frames[0]
        rows = sorted(
            zip(
                df[enc.ORDER].tolist(),
                df["_s"].tolist(),
                df["k_m"].tolist(),
                df["_t"].tolist(),
                df["v_m"].tolist(),
            ),
            key=operator.itemgetter(0, 1),
        )
        saved = unpack(state.get[0]) if state.exists else None
        if saved is None and all(r[1] == END for r in rows):
            return  # an end of input for a queue that never had a record
        spec = self.spec
        q: WindowQueue | JoinQueue = (
            WindowQueue(spec, saved) if isinstance(spec, WindowSpec) else JoinQueue(spec, saved)
        )
        windows = isinstance(spec, WindowSpec)
        fn = spec.fn if isinstance(spec, WindowSpec) else spec.joiner
        out_k: list[bytes] = []
        out_v: list[bytes | None] = []
        out_o: list[bytes] = []
        out_late: list[bool] = []
        results: list[tuple[Any, Any]] = []
        emit = _appender(results)
        queue = int(key[0])
        for o, side, km, ts, vm in rows:
            if side == END:
                q.end_of_input(emit)
                prefix = _AT_END + enc.be32(queue)
            else:
                k, v = unpack(km), unpack(vm)
                try:
                    ok = q.record(side, k, v, ts, emit)
                except Exception as e:
                    self.policy.failed(spec.name, e, key=k, value=v, fn=fn, order=o)
                    ok = None  # (its earlier results stand, as on the engine)
                if ok is False and windows:  # late (a late join record just counts)
                    out_k.append(km)
                    out_v.append(vm)
                    out_o.append(o)
                    out_late.append(True)
                prefix = o
            for i, (rk, rv) in enumerate(results):
                try:
                    kb, vb = pack(rk), None if rv is None else pack(rv)
                except Exception as e:
                    self.policy.failed(spec.name, e, key=rk, value=rv, fn=fn, order=o)
                    continue
                out_k.append(kb)
                out_v.append(vb)
                out_o.append(prefix + enc.be32(i))
                out_late.append(False)
            results.clear()
        state.update((pack(q.save()),))
        if out_k:
            yield pd.DataFrame({"k_m": out_k, "v_m": out_v, enc.ORDER: out_o, "_late": out_late})


def _appender(results: list[tuple[Any, Any]]) -> Emit:
    def emit(key: Any, value: Any) -> None:
        results.append((key, value))

    return emit
