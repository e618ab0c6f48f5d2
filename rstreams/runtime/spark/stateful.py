"""Windows, sessions, ``.late()`` and joins on Structured Streaming: the embedded
engine's window and join processors, replayed per queue on Spark's RocksDB state store.

**Why per queue.** On the embedded engine a window or join processor runs once per queue
of its shuffle topic (``mmh3(msgpack(key)) % queues``, with the planner's queue count)
and judges lateness, window closing and join expiry against *stream time*: the step's,
the largest timestamp its producer has sent to any of its queues (docs/windows.md,
event time; here the producer is the query's source order, and :class:`_Route` sends
every record that raises that time to every queue as a time row). Each queue holds a
:class:`~rstreams.semantics.clock.StepClock` (:func:`replay_plan`: one told input, the
source order): the queue's records and time rows of a micro-batch tell it their times
in one call, and the core judges each row by the time it says. Stream time is
shared by all keys: a record of one key closes the windows of another. A Spark
operator keyed by the record key could not replay that, and Spark's own session windows
and stream-stream joins judge by one watermark per query and emit in append mode only
once it has passed, so a bounded run would lose its last sessions and its unmatched
outer-join records. Here
each record goes to the embedded engine's queue (column ``_q``), and
``applyInPandasWithState`` grouped by queue runs, per queue and micro-batch, the
queue's records in source order (``_o``) through :class:`WindowQueue` or
:class:`JoinQueue`: adapters of the semantics core (:mod:`rstreams.semantics.windows`,
:mod:`rstreams.semantics.joins`) that the embedded engine's ``WindowAggregateProcessor``
and ``JoinProcessor`` run too, here over a dict. Window
assignment, session merging, both emit modes (``Windowed.closed`` included), lateness
and ``.late()``, join buffering within the JoinWindow (a late join record is joined
but not buffered), temporal joins (:mod:`rstreams.semantics.temporal`: each side's
versions, a record's position its ``_o``, answered once stream time passes its time +
grace, ``ttl``) and the unmatched results of left/outer joins are therefore the
embedded engine's, record for record. Every result carries the ``_o`` of the record
that caused it, i.e. released it (a time row's results come after its record's, the
end of input's after every record), plus its position among that record's results, so
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

import os
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.errors import UnsupportedOperation
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.compiler import Compiler, Stream
from rstreams.runtime.spark.segments import ErrorPolicy
from rstreams.runtime.spark.tables import is_local, local_path, write_bytes_atomically
from rstreams.runtime.spark.timed import join_side_frame, timed_frame
from rstreams.semantics.aggregations import Aggregation
from rstreams.semantics.clock import ClockPlan, StepClock
from rstreams.semantics.joins import JoinCore
from rstreams.semantics.temporal import TemporalJoinCore
from rstreams.semantics.timing import NO_TIME, DictState, Emit
from rstreams.semantics.windows import WindowCore

#: Directory (under the checkpoint) of the end-of-input markers of bounded runs.
MARKERS = "_end-of-input"
#: Ordering-key prefix of what a queue emits at the end of input (after every record).
_AT_END = b"\xff\xff"
#: ``_s``: the side of a record (windows use LEFT), an end-of-input marker, or a time row
#: (the event time another queue's record reached, see :class:`_Route`).
LEFT, RIGHT, END, TIME = 0, 1, 2, 3
#: Ordering-key infix of what a time row's expiry emits (after its record's results).
_AFTER = b"\xff\xff\xff\xff"

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
    """Windowed and temporal joins, inner/left/outer."""
    queues = queue_count(comp, node)
    if node.window is None:  # (a temporal join needs no selectTimestamp)
        left = join_side_frame(comp, node.parents[0], node, node.left_key)
        right = join_side_frame(comp, node.parents[1], node, node.right_key)
    else:
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
    as the embedded shuffle sink picks it (the default modulo queue mapper).

    Event time is the step's, not the queue's (docs/windows.md, event time): a record
    is judged by the largest timestamp of the records before it in source order, on
    any queue. So every record whose timestamp is above those before it in its Arrow
    batch (in ``_o`` order) also goes to every other queue as a *time row* (``_s`` =
    TIME, no key or value): each queue then sees every record that set a new largest
    timestamp, whichever batch or partition it was in (a record that set none is below
    one that did, earlier in its batch, which every queue sees)."""

    queues: int
    side: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from rstreams.runtime.queues.mapper import ModuloQueueMapper

        mapper = ModuloQueueMapper()
        names = ["k_m", "_t", "v_m", enc.ORDER, "_s", "_q"]
        for rb in batches:
            queue = mapper.queues_for(rb.column(0).to_pylist(), self.queues)
            side = pa.array([self.side] * rb.num_rows, pa.int32())
            yield pa.RecordBatch.from_arrays(
                [*rb.columns, side, pa.array(queue, pa.int32())], names=names
            )
            if self.queues > 1 and rb.num_rows:
                yield self._time_rows(rb.column(1).to_pylist(), rb.column(3).to_pylist(), queue)

    def _time_rows(self, ts: list[int], order: list[bytes], queue: list[int]) -> pa.RecordBatch:
        out_t: list[int] = []
        out_o: list[bytes] = []
        out_q: list[int] = []
        top = NO_TIME
        for i in sorted(range(len(ts)), key=order.__getitem__):
            if ts[i] > top:
                top = ts[i]
                for q in range(self.queues):
                    if q != queue[i]:
                        out_t.append(top)
                        out_o.append(order[i])
                        out_q.append(q)
        n = len(out_t)
        return pa.RecordBatch.from_arrays(
            [
                pa.nulls(n, pa.binary()),
                pa.array(out_t, pa.int64()),
                pa.nulls(n, pa.binary()),
                pa.array(out_o, pa.binary()),
                pa.array([TIME] * n, pa.int32()),
                pa.array(out_q, pa.int32()),
            ],
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
    grace: int = 0
    emits: str = "LR"

    @classmethod
    def of(cls, node: n.JoinNode) -> JoinSpec:
        return cls(
            node.name, node.join_type, node.joiner, node.window, node.ttl, node.grace,
            node.emits,
        )  # fmt: skip


#: The one input a replayed queue's clock is told the time of: the query's source order,
#: the single producer of the step's records, both sides of a join included (as the
#: driver's pipe: docs/windows.md, event time).
SOURCE_ORDER = "source order"


def replay_plan(queue: int) -> ClockPlan:
    """The :class:`~rstreams.semantics.clock.ClockPlan` of queue ``queue`` of a replayed
    step: one told input, the source order (its records and time rows tell its time); no
    marked input, nothing sent on (a replayed queue has no consumers to tell)."""
    return ClockPlan((0, queue), sources=(SOURCE_ORDER,), told=(SOURCE_ORDER,))


class _ReplayedQueue:
    """What a window and a join queue share: the queue's :class:`StepClock` (built from
    :func:`replay_plan`, restored from the saved stream time), which the core judges by:
    each record and time row is replayed with the time the clock says the source order
    has reached (:meth:`StepClock.told_each`, once per micro-batch)."""

    core: WindowCore | JoinCore | TemporalJoinCore

    def __init__(self, queue: int, saved: dict[str, Any] | None) -> None:
        self.clock = StepClock(replay_plan(queue), 0)  # (no wall-clock rules: now is 0)
        if saved is not None:
            self.clock.told(SOURCE_ORDER, saved["t"])

    def _restore_time(self) -> None:
        self.core.time = self.core.max_time = self.clock.told_time

    @property
    def time(self) -> int:
        """The queue's stream time: what its clock was told."""
        return self.clock.told_time

    def _told(self, ts: int) -> int:
        """A record replayed on its own (no time given): the clock is told ``ts`` now;
        the time it reached by it. (:class:`Replay` tells a micro-batch at once.)"""
        return self.clock.told_each(SOURCE_ORDER, (ts,))[0]

    def advance(self, time: int, emit: Emit) -> None:
        """A time row: the step's time reached ``time`` (by a record of another queue,
        as the clock says); close and expire what that allows, as the record's own
        queue does."""
        core = self.core
        if time > core.time:
            core.emit = emit
            core.max_time = max(core.max_time, time)
            core.advance(time)


class WindowQueue(_ReplayedQueue):
    """One queue of a window step: :class:`~rstreams.semantics.windows.WindowCore` over
    a dict, saved as ``{"t": stream time, "w": [[key, start, end, aggregate, largest
    timestamp]]}`` (an earlier version's rows have no largest timestamp: results carry
    no event time here, so the start stands in; its ``"h"``, the close-time heap, is not
    read: the core rebuilds it from the windows, as the engine's does)."""

    core: WindowCore

    def __init__(self, spec: WindowSpec, saved: dict[str, Any] | None, queue: int = 0) -> None:
        super().__init__(queue, saved)
        agg = Aggregation.of_parts(spec.op, spec.fn, spec.initializer, spec.merger)
        self.state = DictState()
        self.core = WindowCore(agg, spec.window, spec.emit, self.state, _ignore)
        self.session = self.core.session
        if saved is not None:
            self._restore_time()
            for k, s, e, agg_value, *top in saved["w"]:
                if self.session:
                    self.state.put(("s", k, s), (e, agg_value))
                else:
                    self.state.put(("w", k, s), (agg_value, top[0] if top else s))
            self.core.restore()

    def save(self) -> dict[str, Any]:
        rows = []
        for (_, k, s), value in self.state.items():
            if self.session:
                rows.append([k, s, value[0], value[1]])
            else:
                rows.append([k, s, s + self.core.size, value[0], value[1]])
        return {"t": self.time, "w": rows}

    def record(self, side: int, k: Any, v: Any, ts: int, emit: Emit,
               watermark: int | None = None, order: bytes = b"") -> bool | None:  # fmt: skip
        """Replay one record, with the time its clock reached by it (``watermark``; None:
        see :meth:`_told`): True if it counted, False if it was late; raises if the
        update failed (then nothing expires, as on the engine)."""
        self.core.emit = emit
        if watermark is None:
            watermark = self._told(ts)
        return self.core.record(k, v, ts, -1, watermark)

    def end_of_input(self, emit: Emit) -> None:
        """Close every open window (close mode); update mode keeps them for more input."""
        self.core.emit = emit
        self.core.end_of_input()


class JoinQueue(_ReplayedQueue):
    """One queue of a join step: :class:`~rstreams.semantics.joins.JoinCore` (windowed)
    or :class:`~rstreams.semantics.temporal.TemporalJoinCore` (no window, a record's
    position its ``_o``) over a dict. A record's sequence number is its offset in the
    queue (a counter kept in the state, as the shuffle topic's offsets are). Saved as
    ``{"t": stream time, "n": counter, "j": [[side, key, ts, seq, value, matched]]}``
    (windowed; an earlier version's ``"h"``, the expiry heap, is not read: the core
    rebuilds it from the buffers) or ``{"t", "n", "s": [[state key, value]]}`` (temporal: the
    core's own entries; an older table join's ``"j"`` rows are read as its old entries)."""

    def __init__(self, spec: JoinSpec, saved: dict[str, Any] | None, queue: int = 0) -> None:
        super().__init__(queue, saved)
        self.state = DictState()
        self.window = spec.window
        self.core: JoinCore | TemporalJoinCore
        if spec.window is None:
            self.core = TemporalJoinCore(
                spec.join_type, spec.joiner, spec.ttl, spec.grace, self.state, _ignore,
                emits=spec.emits,
            )  # fmt: skip
        else:
            self.core = JoinCore(spec.join_type, spec.joiner, spec.window, self.state, _ignore)
        self.offset = 0
        if saved is None:
            return
        self._restore_time()
        self.offset = saved["n"]
        if isinstance(self.core, TemporalJoinCore):
            for skey, value in saved.get("s", ()):
                self.state.put(tuple(skey), value)
            for side, k, ts, _, v, _ in saved.get("j", ()):
                self.state.put(("j", side, k), (v, ts))
            self.core.restore()
            return
        for side, k, ts, seq, v, matched in saved["j"]:
            self.state.put(("j", side, k, ts, seq), (v, matched))
        self.core.restore()

    def save(self) -> dict[str, Any]:
        if isinstance(self.core, TemporalJoinCore):
            entries = [[skey, value] for skey, value in self.state.items()]
            return {"t": self.time, "n": self.offset, "s": entries}
        rows: list[list[Any]] = []
        for skey, value in self.state.items():
            _, side, k, ts, seq = skey
            rows.append([side, k, ts, seq, value[0], value[1]])
        return {"t": self.time, "n": self.offset, "j": rows}

    def record(self, side_no: int, k: Any, v: Any, ts: int, emit: Emit,
               watermark: int | None = None, order: bytes = b"") -> bool | None:  # fmt: skip
        """Replay one record of side ``side_no`` (``order``: its ``_o``, a temporal
        join's position; ``watermark``: the time its clock reached by it, None: see
        :meth:`_told`): False if it was late."""
        off = self.offset
        self.offset += 1
        self.core.emit = emit
        side = "L" if side_no == LEFT else "R"
        if watermark is None:
            watermark = self._told(ts)
        return self.core.record(side, k, v, ts, off, watermark, order)

    def end_of_input(self, emit: Emit) -> None:
        """Nothing can match any more: emit the unmatched, empty the buffers."""
        self.core.emit = emit
        self.core.end_of_input()


def _ignore(key: Any, value: Any, ts: int, off: int) -> None:
    """The emit of a queue between records (nothing is emitted there)."""


@attrs.frozen
class Replay:
    """The function given to ``applyInPandasWithState``, grouped by queue ``_q``.

    Sorts the queue's rows of the micro-batch by ``(_o, _s)`` (end-of-input markers
    last), restores a :class:`WindowQueue` or :class:`JoinQueue` from the queue's state,
    replays the rows through it (:meth:`_replay`), and returns every result (``_late``
    false) and late record (``_late`` true; windows only) with its ordering key.
    """

    spec: WindowSpec | JoinSpec
    policy: ErrorPolicy

    def __call__(self, key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        from rstreams.serde import INTERNAL_SERDE

        rows = _sorted_rows(pdfs)
        if rows is None:
            return
        saved = INTERNAL_SERDE.deserialize(state.get[0]) if state.exists else None
        if saved is None and bool((rows["_s"] == END).all()):
            return  # an end of input for a queue that never had a record
        queue, spec = int(key[0]), self.spec
        q: WindowQueue | JoinQueue = (
            WindowQueue(spec, saved, queue)
            if isinstance(spec, WindowSpec)
            else JoinQueue(spec, saved, queue)
        )
        out = _Out(spec, self.policy)
        self._replay(q, rows, out, queue)
        state.update((INTERNAL_SERDE.serialize(q.save()),))
        if out.keys:
            yield out.frame()

    def _replay(self, q: WindowQueue | JoinQueue, df: Any, out: _Out, queue: int) -> None:
        """Replay the sorted rows ``df`` through ``q``, into ``out``. The queue's clock is
        told the source order's time at every row at once (a record's or a time row's
        ``_t``; an end-of-input marker tells none), and each row is replayed with the
        time it says: a record judged by it, a time row closing and expiring by it."""
        from rstreams.serde import INTERNAL_SERDE

        unpack = INTERNAL_SERDE.deserialize
        told = df["_t"].where(df["_s"] != END, NO_TIME).tolist()
        times = q.clock.told_each(SOURCE_ORDER, told)
        windows = isinstance(self.spec, WindowSpec)
        results: list[tuple[Any, Any]] = []
        emit = _appender(results)
        for o, side, km, ts, vm, now in zip(
            df[enc.ORDER].tolist(), df["_s"].tolist(), df["k_m"].tolist(),
            df["_t"].tolist(), df["v_m"].tolist(), times,
        ):  # fmt: skip
            if side == END:
                q.end_of_input(emit)
                prefix = _AT_END + enc.be32(queue)
            elif side == TIME:
                q.advance(now, emit)
                prefix = o + _AFTER
            else:
                k, v = unpack(km), unpack(vm)
                try:
                    ok = q.record(side, k, v, ts, emit, now, o)
                except Exception as e:
                    out.failed(e, k, v, o)
                    ok = None  # (its earlier results stand, as on the engine)
                if ok is False and windows:  # late (a late join record just counts)
                    out.late(km, vm, o)
                prefix = o
            if results:
                out.results(results, prefix, o)


def _sorted_rows(pdfs: Iterator[Any]) -> Any:
    """A queue's rows of a micro-batch, one frame sorted by ``(_o, _s)`` (stable: the
    order Spark gave rows alike in both); None if there are none."""
    import pandas as pd

    frames = [p for p in pdfs if len(p)]
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return df.sort_values([enc.ORDER, "_s"], kind="stable", ignore_index=True)


class _Out:
    """What a queue's replay of a micro-batch returns: each result, packed, its ordering
    key the prefix of what released it plus its position among that one's results, and
    each late record (windows) as it came."""

    def __init__(self, spec: WindowSpec | JoinSpec, policy: ErrorPolicy) -> None:
        self.name = spec.name
        self.fn = spec.fn if isinstance(spec, WindowSpec) else spec.joiner
        self.policy = policy
        self.keys: list[bytes] = []
        self.values: list[bytes | None] = []
        self.orders: list[bytes] = []
        self.late_flags: list[bool] = []

    def failed(self, e: Exception, key: Any, value: Any, order: bytes) -> None:
        """A record's update, or the packing of a result, raised: the error policy."""
        self.policy.failed(self.name, e, key=key, value=value, fn=self.fn, order=order)

    def late(self, km: bytes, vm: bytes, order: bytes) -> None:
        self.keys.append(km)
        self.values.append(vm)
        self.orders.append(order)
        self.late_flags.append(True)

    def results(self, results: list[tuple[Any, Any]], prefix: bytes, order: bytes) -> None:
        """Take (and clear) ``results``, released by the row at ``order``."""
        from rstreams.serde import INTERNAL_SERDE

        pack = INTERNAL_SERDE.serialize
        for i, (rk, rv) in enumerate(results):
            try:
                kb, vb = pack(rk), None if rv is None else pack(rv)
            except Exception as e:
                self.failed(e, rk, rv, order)
                continue
            self.keys.append(kb)
            self.values.append(vb)
            self.orders.append(prefix + enc.be32(i))
            self.late_flags.append(False)
        results.clear()

    def frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame(
            {"k_m": self.keys, "v_m": self.values, enc.ORDER: self.orders, "_late": self.late_flags}
        )


def _appender(results: list[tuple[Any, Any]]) -> Emit:
    def emit(key: Any, value: Any, ts: int, off: int) -> None:
        results.append((key, value))

    return emit
