"""A task: the processor chain of one sub-topology for one queue, plus its state.

Commit protocol
---------------
A commit gathers everything the task did since the last one: the records it produced
(per topic queue), the state changes of each store (which are also its changelog
records) and the new input offsets. Then:

* **at-least-once**: append the outputs and changelogs, write the stores, commit the
  offsets. A crash in between replays the input since the last commit.
* **exactly-once**: first append the whole transaction as *one* record to the job's
  transaction topic (queue = the task's index) and make it durable: that is the commit
  point. Then apply it as above, marking the first record of every frame it appends
  with the header ``rs.txn = <task>:<seq>``. Nothing reaches an output topic before its
  transaction is committed, so readers never see uncommitted output. If the worker dies
  while applying, the task's next owner finds the last transaction not fully applied
  (its offsets are not the committed ones) and applies it again, skipping every frame
  whose marker is already in its queue (searched from the queue end noted in the
  transaction): no record is lost or written twice.

State is restored before the task builds its processors: a RocksDB store whose
recorded changelog offset is still valid replays only the changelog tail after it (the
data and that offset are written in one WriteBatch); otherwise, and for memory stores,
the changelog is replayed from its start (latest value per key wins, tombstones
delete). Processors are built and initialized afterwards, from the restored stores.

Damaged state
-------------
A store is a cache of its changelog. A RocksDB store whose local copy can not be opened
or read (:class:`~rstreams.state.stores.StoreDamagedError`: checksum mismatch, missing
SST, bad manifest) is deleted, with a warning, and rebuilt from its changelog: while the
task is built, by the task itself; later (damage found by a read or write while
processing or committing), by its worker, which drops the task without committing and
builds it again. Such an error is never a record's: ``on_error`` does not apply. A
changelog that can not be read, or ends below the offset a store's checkpoint says it
reached, can not rebuild anything: the task stops with a
:class:`~rstreams.state.stores.LostStateError` naming the queue and offset (the job is
then rebuilt from its input with ``--fresh``; see docs/state.md).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import msgpack

from rstreams.errors import RStreamsError, SerdeError, StateStoreError
from rstreams.planner.topology import SubTopology, Topology
from rstreams.runtime.engine.context import EngineConfig, StreamContext
from rstreams.runtime.engine.faults import maybe_crash
from rstreams.runtime.engine.processors import Processor, SourceProcessor
from rstreams.runtime.engine.producer import Columns, Producer
from rstreams.runtime.engine.registry import PROCESSORS
from rstreams.runtime.engine.taskid import TaskId
from rstreams.runtime.engine.watermarks import (
    END,
    NO_TIME,
    InputWatermarks,
    decode_control,
    encode_control,
    producers_of,
)
from rstreams.runtime.queues._logformat import encode_column_batch
from rstreams.runtime.queues.base import RecordColumns
from rstreams.runtime.queues.broker import Broker
from rstreams.serde import INTERNAL_SERDE
from rstreams.state.cache import CachedStore
from rstreams.state.stores import KeyValueStore, LostStateError, MemoryStore, StoreDamagedError

Fetch = Callable[[str, int, int, int], RecordColumns]
Row = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]

TXN_HEADER = "rs.txn"
#: How often (wall ms) a task tells its consumers an unchanged watermark again.
RESEND_WATERMARK_MS = 10_000

log = logging.getLogger("rstreams.task")


def _pack_txn(txn: dict[str, Any]) -> bytes:
    # Plain msgpack, not the internal serde: rows and headers are tuples that must come
    # back as tuples, and the serde's tuple extension costs a Python call per row.
    return msgpack.packb(txn, use_bin_type=True)


def _unpack_txn(data: bytes) -> dict[str, Any]:
    txn = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)
    if not isinstance(txn, dict):
        raise ValueError(f"a transaction is a map, not {type(txn).__name__}")
    appends = txn.get("appends")
    if not isinstance(appends, tuple) or not all(
        isinstance(a, tuple) and len(a) == 6 and isinstance(a[3], bytes) for a in appends
    ):
        # e.g. written by an earlier release, which stored rows instead of frames
        raise ValueError("its appends are not (topic, queue, hint, payload, count, max_ts)")
    if not isinstance(txn.get("offsets"), dict) or "seq" not in txn or "task" not in txn:
        raise ValueError("it lacks task, seq or offsets")
    return txn


class _Commit:
    """A commit between its phases (see :func:`commit_tasks`)."""

    __slots__ = ("at", "changes", "txn", "written")

    def __init__(
        self,
        txn: dict[str, Any] | None,
        at: int,
        changes: dict[str, Columns],
        written: list[tuple[str, int]],
    ) -> None:
        self.txn = txn
        self.at = at  # offset of the transaction record
        self.changes = changes
        self.written = written


def commit_tasks(tasks: Collection[Task], broker: Broker) -> list[tuple[str, int]]:
    """Commit several tasks of a process together (group commit): every task's
    transaction is appended, then all are made durable with one flush (each file is
    synced once, however many tasks wrote to it), then all outputs are written and made
    durable with one more, then offsets are committed. Returns the queues written to."""
    begun = [(t, c) for t in tasks if (c := t._commit_begin()) is not None]
    if not begun:
        return []
    broker.flush()  # exactly-once: the commit point of every transaction
    for t, c in begun:
        t._commit_apply(c)
    if any(c.txn is not None for _, c in begun):
        broker.flush()
    for t, c in begun:
        t._commit_end(c)
    return [q for _, c in begun for q in c.written]


def relieve_memory(tasks: Collection[Task], budget: int) -> list[tuple[str, int]]:
    """Keep what the tasks of a process hold in memory under ``budget`` entries: first
    forget cached state that is already stored, then commit the tasks that hold the
    most (a commit writes out their changed state, combined partials and coalesced
    updates). Returns the queues the commits wrote to."""
    if sum(t.held() for t in tasks) <= budget:
        return []
    for t in tasks:
        t.drop_clean()
    held = {t: t.held() for t in tasks}
    total = sum(held.values())
    written: list[tuple[str, int]] = []
    for t in sorted(tasks, key=held.__getitem__, reverse=True):
        if total <= budget:
            break
        written += t.commit()
        t.drop_clean()  # what the commit stored
        total -= held[t] - t.held()
    return written


def transactions_topic(job_id: str) -> str:
    return f"{job_id}-transactions"


#: Where the advice of errors that only a rebuild from the input can cure points to.
REBUILD_ADVICE = (
    "rebuild the job from its input with `rstreams run PIPELINE --input ... --fresh` "
    "(docs/state.md#recovering-from-damage)"
)


def discard_damaged_store(error: StoreDamagedError, state_dir: str | None, who: str) -> None:
    """Delete the local copy of the store ``error`` names, so that it is rebuilt from
    its changelog; with a warning. Only ever a directory under ``state_dir``: otherwise
    (or with no path) ``error`` is raised."""
    path = Path(error.path) if error.path else None
    root = Path(state_dir).resolve() if state_dir else None
    if path is None or root is None or not path.resolve().is_relative_to(root):
        raise error
    log.warning(
        "%s: state store %r is damaged (%s); deleting its local copy %s and "
        "rebuilding it from its changelog",
        who, error.store, error, path,
    )  # fmt: skip
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        raise StateStoreError(
            f"state store {error.store!r}: can not delete its damaged local copy {path}; "
            f"delete it by hand and run again ({error})",
            store=error.store,
            path=str(path),
        ) from error


class Task:
    """Runs sub-topology ``sub`` on queue ``queue`` of every topic it reads.

    Built in phase 3, in this order: the stores of this queue are opened; the previous
    owner's unfinished transaction, if any, is completed; the stores are restored from
    their changelogs; only then are fresh processors built from the factories and
    initialized. A processor's ``init()`` rebuilds what it keeps in memory (window and
    join indexes, stream time) from the restored store, so nothing a processor holds
    can predate its queue's state.
    """

    def __init__(
        self,
        topology: Topology,
        sub: SubTopology,
        queue: int,
        broker: Broker,
        producer: Producer,
        config: EngineConfig,
        group: str,
        clock: Callable[[], int],
        fetch: Fetch | None = None,
        txn_queue: int | None = None,
        on_restore: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.id = str(TaskId(sub.id, queue))  # its name on disk and in transactions
        self.topology = topology
        #: Called with (task id, changelog offsets replayed, offsets to replay) while
        #: restoring (about twice a second) and once at the end.
        self.on_restore = on_restore
        self.sub = sub
        self.queue = queue
        self.broker = broker
        self.producer = producer
        self.group = group
        self.config = config
        self.clock = clock
        self.exactly_once = config.guarantee == "exactly-once"
        if self.exactly_once and txn_queue is None:
            raise RStreamsError(f"task {self.id}: exactly-once needs a transaction queue")
        self.txn_topic = transactions_topic(topology.job_id)
        self.txn_queue = txn_queue
        self.txn_seq = 0
        self.committed: dict[str, int] = {}
        self._commits = 0
        self.fetch: Fetch = fetch or broker.read_columns
        #: Set when processing raised: nothing of this task is committed after that, so
        #: the failed record (and everything after it) is read again on restart.
        self.failed = False
        self.changelogs = {name: topology.stores[name].changelog_topic for name in sub.stores}
        self.stores: dict[str, CachedStore] = {}
        discarded: set[str] = set()
        while True:
            try:
                self._build(topology, sub, producer, clock)
                break
            except StoreDamagedError as e:
                self._close_stores()  # a RocksDB store stays locked until closed
                if e.path is None or e.path in discarded:
                    raise  # a new copy is damaged too: not the store's files
                discarded.add(e.path)
                discard_damaged_store(e, config.state_dir, f"task {self.id}")
            except BaseException:
                self._close_stores()
                raise
        self.positions = {t: broker.committed(group, t, queue) for t in self.sources}
        self.committed = dict(self.positions)

    def _build(
        self, topology: Topology, sub: SubTopology, producer: Producer, clock: Callable[[], int]
    ) -> None:
        """Open the stores, finish the last transaction, restore, build the processors."""
        self.failed = False  # a store write of an earlier attempt may have set it
        self.stores = {}
        for name in sub.stores:
            self.stores[name] = CachedStore(
                self._open_store(name),
                INTERNAL_SERDE,
                topology.stores[name].serde,
                max_entries=self.config.cache_entries,
                auto_flush=False,
            )
        #: What this task had sent up to its last commit (exactly-once: kept in its
        #: transactions), so that a new owner goes on from there.
        self._restored_times = (NO_TIME, NO_TIME)
        if self.exactly_once:
            self._recover()  # its changelog records, if any, are restored next
        started = time.monotonic()
        self.restored = self._restore()
        self.restore_seconds = time.monotonic() - started
        # Processors only now, on restored state: built earlier, they would have
        # rebuilt their indexes and stream time from stores still empty.
        self._build_processors(topology.job_id, producer, clock)

    def _close_stores(self) -> None:
        """Close every store without writing anything (a failed task, damage): errors
        closing a damaged store are not the error to report."""
        for s in self.stores.values():
            with contextlib.suppress(StateStoreError):
                s.close(flush=False)

    def abandon(self) -> None:
        """Close without committing anything (damaged state was found): the task's next
        owner restores its state and goes on from its last commit."""
        self.failed = True
        self._close_stores()

    def _build_processors(self, job_id: str, producer: Producer, clock: Callable[[], int]) -> None:
        """Phase 3 proper: fresh processors for this queue, initialized on its stores."""
        procs = self.sub.build(PROCESSORS)
        self.processors: list[Processor] = [procs[f.name] for f in self.sub.factories]
        self.sources: dict[str, SourceProcessor] = {}
        for p in self.processors:
            if isinstance(p, SourceProcessor):
                qc = self.broker.queue_count(p.topic)
                if qc is not None and self.queue < qc:
                    self.sources[p.topic] = p
        self.ctx = StreamContext(
            job_id, self.id, self.queue, producer, self.stores, self.config, clock
        )
        self._init_watermarks()
        for p in self.processors:
            p.init(self.ctx)

    def _init_watermarks(self) -> None:
        """Which of this task's inputs carry watermarks (shuffles with several
        producers) and which of its outputs must (the same, seen from upstream)."""
        count = self.broker.queue_count
        topology = self.topology
        producers: list[tuple[int, int]] = []
        #: Shuffle topics read whose records include watermark control records.
        self.marked_inputs: set[str] = set()
        for topic in self.sources:
            if self.config.watermarks and topology.topics[topic].role == "shuffle":
                ps = producers_of(topology, topic, count)
                if len(ps) > 1:
                    self.marked_inputs.add(topic)
                    producers += ps
        self.input_marks = InputWatermarks(producers)
        self.ctx.watermark = self.input_marks.value
        #: Inputs without watermarks: then what this task sends bounds its own watermark.
        self.unmarked_input = len(self.marked_inputs) < len(self.sources)
        #: (shuffle topic, queue count) this task must send its watermark to.
        self.marked_outputs: list[tuple[str, int]] = []
        for f in self.sub.factories:
            if f.kind != "shuffle-sink" or f.topic is None or not self.config.watermarks:
                continue
            entry = (f.topic, count(f.topic) or 0)
            if len(producers_of(topology, f.topic, count)) > 1 and entry not in self.marked_outputs:
                self.marked_outputs.append(entry)
        self.ended = False
        self.idle = False
        self._last_input = self.clock()
        self._sent_mark: tuple[int, bool] = (NO_TIME, False)
        self._sent_at = self._last_input
        # The largest watermark sent short of END (and the largest timestamp sent), as of
        # the last commit of an earlier owner.
        self.ctx.out_time, self._high = self._restored_times

    # -- watermarks ----------------------------------------------------------------------

    @property
    def watermark(self) -> int:
        """This task's watermark: nothing it sends from now on is older (END once its
        bounded input is over)."""
        if self.ended:
            return END
        wm = self.ctx.watermark
        if self.unmarked_input:
            wm = min(wm, self.ctx.out_time)
        return wm

    def _send_watermark(self, again: bool = False) -> None:
        """Tell the consumers of this task's shuffles its watermark, after the records
        it follows (in the same transaction), if it moved (or ``again``). Not while a
        processor holds records back (combined or coalesced updates): they go first,
        at commit."""
        if not self.marked_outputs:
            return
        mark = (self.watermark, self.idle)
        if (mark == self._sent_mark and not again) or (
            not self.ended and any(p.held() for p in self.processors)
        ):
            return
        self._sent_mark = mark
        self._sent_at = self.clock()
        if mark[0] < END and mark[0] > self._high:
            self._high = mark[0]
        value = encode_control((self.sub.id, self.queue), *mark, self._high)
        for topic, n in self.marked_outputs:
            for q in range(n):
                self.producer.send(topic, q, None, value, 0, ())

    def _on_control(self, value: bytes | None) -> None:
        producer, wm, idle, high = decode_control(value)
        if self.input_marks.update(producer, wm, idle, high):
            self.ctx.watermark = self.input_marks.value
            for p in self.processors:
                p.on_watermark()

    # -- state ---------------------------------------------------------------------------

    def _open_store(self, name: str) -> KeyValueStore:
        if self.config.state == "rocksdb":
            from rstreams.state.rocksdb import RocksDBStore

            if self.config.state_dir is None:
                raise RStreamsError("RocksDB state needs EngineConfig.state_dir")
            path = Path(self.config.state_dir) / name / str(self.queue)
            return RocksDBStore(path, name, self.config.rocksdb)
        return MemoryStore(name)

    def _restore(self) -> int:
        """Bring every store up to its changelog's end; returns records replayed. Run
        once, by the constructor, before any processor exists."""
        maybe_crash("restore")
        started = time.monotonic()
        plan = []
        for name, topic in self.changelogs.items():
            inner = self.stores[name].inner
            start = self.broker.start_offset(topic, self.queue)
            end = self.broker.end_offset(topic, self.queue)
            pos = start
            checkpoint = inner.meta("changelog_offset") if hasattr(inner, "meta") else None
            if checkpoint is not None and checkpoint > end:
                # The store had records its changelog no longer has: they are lost.
                raise LostStateError(
                    f"task {self.id}: state store {name!r} is at offset {checkpoint} of "
                    f"its changelog {topic}[{self.queue}], which ends at {end}: records "
                    f"{end}..{checkpoint - 1} of {topic}[{self.queue}]@{end} are gone "
                    f"(the log was cut or lost its tail), and the state they held with "
                    f"them; {REBUILD_ADVICE}",
                    store=name, topic=topic, queue=self.queue, offset=end,
                )  # fmt: skip
            if checkpoint is None and getattr(inner, "dropped_files", None):
                log.warning(
                    "task %s: state store %r lost SST files its MANIFEST no longer lists "
                    "(%s; a damaged MANIFEST?); rebuilding it from its changelog",
                    self.id, name, ", ".join(inner.dropped_files),  # type: ignore[attr-defined]
                )  # fmt: skip
            if checkpoint is not None and start <= checkpoint <= end:
                pos = checkpoint  # a valid local checkpoint: replay the tail only
            elif len(inner):
                if checkpoint is None:  # every write of a task's store records one
                    log.warning(
                        "task %s: state store %r holds data but no changelog offset (its "
                        "local copy lost part of its history, e.g. a damaged MANIFEST); "
                        "deleting it and rebuilding it from its changelog",
                        self.id, name,
                    )  # fmt: skip
                inner.clear()  # type: ignore[attr-defined]
            plan.append((name, topic, pos, end))
        total = sum(end - pos for _, _, pos, end in plan)
        if total:
            log.info("task %s: restoring state from %d changelog offsets", self.id, total)
        n = done = 0
        next_report = started + 0.5
        for name, topic, pos, end in plan:
            inner = self.stores[name].inner
            serde = self.stores[name].value_serde
            first = pos
            while pos < end:
                records = self._read_changelog(name, topic, pos)
                if not len(records):
                    break
                self._check(records, serde, topic)
                pos = records.last_offset + 1
                self._write_store(inner, records.keys, records.values, pos, topic)
                n += len(records)
                if self.on_restore is not None and time.monotonic() >= next_report:
                    self.on_restore(self.id, done + pos - first, total)
                    next_report = time.monotonic() + 0.5
            done += end - first
        if self.on_restore is not None:
            self.on_restore(self.id, total, total)
        if n:
            took = time.monotonic() - started
            log.info(
                "task %s: restored %d changelog records in %.1f s (%.0f records/s)",
                self.id, n, took, n / took if took else 0.0,
            )  # fmt: skip
        return n

    def _read_changelog(self, store: str, topic: str, pos: int) -> RecordColumns:
        from rstreams.runtime.queues.filelog import CorruptLogError

        try:
            return self.broker.read_columns(topic, self.queue, pos, 10_000)
        except CorruptLogError as e:
            if e.topic != topic:
                raise
            at = pos if e.offset is None else e.offset
            raise LostStateError(
                f"task {self.id}: state store {store!r} can not be restored: its changelog "
                f"{topic}[{self.queue}]@{at} can not be read ({e.segment}: {e.reason}); "
                f"it is the only durable copy of that state: {REBUILD_ADVICE}",
                store=store, topic=topic, queue=self.queue, offset=at,
            ) from e  # fmt: skip

    def _check(self, records: RecordColumns, serde: Any, topic: str) -> None:
        """Refuse state that can not be read back, naming where it is: never reset it."""
        try:
            if not all(records.keys):  # None, or b"" (no msgpack value is empty)
                raise SerdeError("a changelog record has no key")
            values = records.values
            # Values may be None (tombstones); b"" is never a valid value and fails below.
            serde.deserialize_many(values if all(values) else [v for v in values if v is not None])
            INTERNAL_SERDE.deserialize_many(records.keys)  # type: ignore[arg-type]
            return
        except Exception:
            pass
        for r in records.records():
            try:
                if r.key is None:
                    raise SerdeError("a changelog record has no key")
                INTERNAL_SERDE.deserialize(r.key)
                if r.value is not None:
                    serde.deserialize(r.value)
            except Exception as e:
                raise SerdeError(
                    f"task {self.id}: bad state in changelog {topic}[{self.queue}]@{r.offset}: "
                    f"{e}; refusing to restore (fix or remove the record; state is not reset)"
                ) from None

    def _write_store(
        self,
        inner: KeyValueStore,
        keys: Sequence[Any],  # bytes: changelog records always have a key
        values: Sequence[bytes | None],
        offset: int,
        topic: str,
    ) -> None:
        try:
            if hasattr(inner, "meta"):
                inner.write_columns(keys, values, meta={"changelog_offset": offset})  # type: ignore[attr-defined]
            else:
                inner.write_batch(list(zip(keys, values)))
        except StateStoreError:
            self.failed = True  # nothing more of this task is committed
            raise

    # -- processing ----------------------------------------------------------------------

    def lag(self) -> int:
        return sum(self.broker.end_offset(t, self.queue) - pos for t, pos in self.positions.items())

    def poll(self, max_records: int) -> int:
        """Process up to ``max_records`` new records of each input queue."""
        n = 0
        for topic, pos in self.positions.items():
            records = self.fetch(topic, self.queue, pos, max_records)
            if len(records):
                self.positions[topic] = records.last_offset + 1
                self._process(topic, records)
                n += len(records)
        return n

    def _process(self, topic: str, records: RecordColumns) -> None:
        try:
            source = self.sources[topic]
            if topic not in self.marked_inputs:
                if self.idle or self.config.source_idle_ms is not None:
                    self._last_input = self.clock()
                    self.idle = False
                source.process_log(self.queue, records)
            elif None not in records.keys:  # no control record among them
                source.process_log(self.queue, records)
            else:
                keys, start = records.keys, 0
                for i, k in enumerate(keys):
                    if k is None:
                        if i > start:
                            source.process_log(self.queue, records.slice(start, i))
                        self._on_control(records.values[i])
                        start = i + 1
                if start < len(keys):
                    source.process_log(self.queue, records.slice(start, len(keys)))
            self._send_watermark()
        except BaseException:
            self.failed = True
            raise

    def process_next(self, topic: str) -> None:
        """Process exactly one record: the next one of ``topic`` (used by the test driver)."""
        pos = self.positions[topic]
        records = self.broker.read_columns(topic, self.queue, pos, 1)
        if len(records):
            self.positions[topic] = records.last_offset + 1
            self._process(topic, records)

    def punctuate(self, now: int) -> None:
        """Wall-clock driven work of the processors (e.g. closing idle windows)."""
        try:
            for p in self.processors:
                p.punctuate(now)
            idle_ms = self.config.source_idle_ms
            if (
                idle_ms is not None
                and self.unmarked_input
                and not self.idle
                and now - self._last_input >= idle_ms
                and not self.lag()
            ):
                self.idle = True  # stop holding the watermark back until input comes
            # Now and then again, unchanged: a consumer restarted since has lost it
            # (what it had read before its last commit is not read again).
            again = self._sent_mark[0] != NO_TIME and now - self._sent_at >= RESEND_WATERMARK_MS
            self._send_watermark(again)
        except BaseException:
            self.failed = True
            raise

    def end_of_input(self) -> None:
        """Bounded input is over for this task's inputs: let processors finish."""
        try:
            for p in self.processors:
                p.end_of_input()
            for p in self.processors:
                p.flush()  # what waits for a commit goes before the final watermark
            self.ended = True
            self._send_watermark()
        except BaseException:
            self.failed = True
            raise

    def input_ended(self) -> None:
        """End of input was declared, and handled by an earlier owner of this task:
        its watermark is infinite again (its consumers may have lost it)."""
        self.ended = True
        self._send_watermark()

    def held(self) -> int:
        """Entries this task keeps in memory: cached state, combined partials,
        coalesced updates (see :func:`relieve_memory`)."""
        return sum(s.held for s in self.stores.values()) + sum(p.held() for p in self.processors)

    def drop_clean(self) -> None:
        for s in self.stores.values():
            s.drop_clean()

    @property
    def wants_commit(self) -> bool:
        """A store's cache is full: commit now to bound memory."""
        return any(s.full for s in self.stores.values())

    # -- commit --------------------------------------------------------------------------

    @property
    def uncommitted(self) -> bool:
        """Input was processed since the last commit."""
        return self.positions != self.committed

    def commit(self) -> list[tuple[str, int]]:
        """Commit what was done since the last commit; returns the queues written to."""
        return commit_tasks([self], self.broker)

    def _commit_begin(self) -> _Commit | None:
        """First phase of a commit: flush processors, take state changes; at-least-once,
        write everything; exactly-once, append the transaction (not yet durable)."""
        if self.failed:
            return None
        maybe_crash("commit-start")
        for p in self.processors:
            p.flush()  # coalesced updates go out now
        self._send_watermark()  # after them, in the same transaction
        ts = self.clock()
        changes: dict[str, Columns] = {}  # the changelog records of each store
        for name, store in self.stores.items():
            try:
                items = store.take_dirty()
            except SerdeError:
                self.failed = True
                raise
            if items:
                keys, values = map(list, zip(*items))
                changes[name] = ([ts] * len(keys), keys, values, [()] * len(keys))
        if not self.exactly_once:
            written = self.producer.flush()
            for name, records in changes.items():
                self._apply_store_change(name, records)
            return _Commit(None, 0, {}, written)
        outputs = list(self.producer.take().items())
        outputs += [((self.changelogs[name], self.queue), c) for name, c in changes.items()]
        offsets = dict(self.positions)
        if not outputs and offsets == self.committed:
            return None
        self.txn_seq += 1
        # Each append is encoded once, as the frame payload it becomes, marker included:
        # applying the transaction (now or on recovery) writes those bytes as they are.
        marker = (TXN_HEADER, f"{self.id}:{self.txn_seq}".encode())
        appends: list[list[Any]] = []
        for (topic, q), (timestamps, keys, values, headers) in outputs:
            headers = list(headers)
            headers[0] = (*headers[0], marker)
            encoded = encode_column_batch(timestamps, keys, values, headers)
            assert encoded is not None
            appends.append([topic, q, self.broker.end_offset(topic, q), *encoded])
        txn = {
            "task": self.id,
            "seq": self.txn_seq,
            "offsets": offsets,
            "appends": appends,
            # Where this task's time got: a new owner's watermark goes on from there.
            "times": (self.ctx.out_time, self._high),
        }
        assert self.txn_queue is not None
        at = self.broker.append(self.txn_topic, self.txn_queue, [(ts, None, _pack_txn(txn), ())])
        return _Commit(txn, at, changes, [(topic, q) for topic, q, *_ in appends])

    def _commit_apply(self, c: _Commit) -> None:
        """Second phase, once the transaction is durable (the commit point): write its
        outputs (made durable before the third phase)."""
        if c.txn is not None:
            maybe_crash("txn-written")
            self._append_outputs(c.txn, redo=False)

    def _commit_end(self, c: _Commit) -> None:
        """Third phase, once the outputs are durable: commit the offsets, write the stores."""
        if c.txn is None:
            self._commit_offsets(self.positions)
            return
        self._commit_offsets(c.txn["offsets"])
        self._commits += 1
        if self._commits % 100 == 0:  # only the last transaction is ever read again
            assert self.txn_queue is not None
            self.broker.purge(self.txn_topic, self.txn_queue, c.at)
        for name, records in c.changes.items():
            self._apply_store_change(name, records, via_changelog=False)

    def _apply_store_change(self, name: str, records: Columns, via_changelog: bool = True) -> None:
        topic = self.changelogs[name]
        if via_changelog:
            self.broker.append_columns(topic, self.queue, *records)
        _, keys, values, _ = records
        self._write_store(
            self.stores[name].inner, keys, values, self.broker.end_offset(topic, self.queue), topic
        )

    def _apply(self, txn: dict[str, Any], redo: bool) -> None:
        self._append_outputs(txn, redo)
        self.broker.flush()
        self._commit_offsets(txn["offsets"])

    def _append_outputs(self, txn: dict[str, Any], redo: bool) -> None:
        marker = (TXN_HEADER, f"{txn['task']}:{txn['seq']}".encode())
        for topic, q, hint, payload, count, max_ts in txn["appends"]:
            if redo and (end := self.broker.end_offset(topic, q)) < hint:
                # The queue held ``hint`` records when the transaction was written:
                # some are gone, and appending again would not bring them back.
                raise LostStateError(
                    f"task {self.id}: {topic}[{q}] ends at offset {end}, below offset "
                    f"{hint} where its last transaction "
                    f"({self.txn_topic}[{self.txn_queue}], seq {txn['seq']}) appended: "
                    f"records {topic}[{q}]@{end}..{hint - 1} are gone (the log was cut or "
                    f"lost its tail); {REBUILD_ADVICE}",
                    topic=topic, queue=q, offset=end,
                )  # fmt: skip
            if redo and self._has_marker(topic, q, hint, marker):
                continue
            self.broker.append_encoded(topic, q, payload, count, max_ts)
            maybe_crash("txn-applying")

    def _has_marker(self, topic: str, q: int, hint: int, marker: tuple[str, bytes]) -> bool:
        pos = max(hint, self.broker.start_offset(topic, q))
        while True:
            records = self.broker.read(topic, q, pos, 10_000)
            if not records:
                return False
            for r in records:
                if marker in r.headers:
                    return True
            pos = records[-1].offset + 1

    def _commit_offsets(self, offsets: dict[str, int]) -> None:
        for topic, pos in offsets.items():
            if self.committed.get(topic) != pos:  # idle queues cost nothing
                self.broker.commit(self.group, topic, self.queue, pos)
        self.committed = dict(offsets)

    def _recover(self) -> None:
        """Finish the last transaction if the previous owner died while applying it."""
        assert self.txn_queue is not None
        end = self.broker.end_offset(self.txn_topic, self.txn_queue)
        if end <= self.broker.start_offset(self.txn_topic, self.txn_queue):
            return
        (last,) = self.broker.read(self.txn_topic, self.txn_queue, end - 1, 1)
        try:
            txn = _unpack_txn(last.value or b"")
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise SerdeError(
                f"task {self.id}: unreadable transaction record at "
                f"{self.txn_topic}[{self.txn_queue}]@{last.offset}: {e}"
            ) from None
        self.txn_seq = int(txn["seq"])
        out_time, high = txn.get("times", (NO_TIME, NO_TIME))
        self._restored_times = (int(out_time), int(high))
        committed = {t: self.broker.committed(self.group, t, self.queue) for t in txn["offsets"]}
        if committed != txn["offsets"]:
            self._apply(txn, redo=True)
        self.broker.purge(self.txn_topic, self.txn_queue, end - 1)

    def close(self) -> None:
        try:
            self.commit()
            for p in self.processors:
                p.close()
        except BaseException:
            self.abandon()
            raise
        if self.failed:  # the error that failed it is the one to report
            self._close_stores()
            return
        for s in self.stores.values():
            s.close(flush=False)
