"""A task: the processor chain of one sub-topology for one queue, plus its state.

A task does three things, each with its own part:

* **processing** (here): records of its input queues go through the processor chain;
  processors read and write the task's stores, each a stack of layers
  (:mod:`rstreams.state.metered`: metered, caching, change-logging, RocksDB or memory);
* **restore** (:mod:`rstreams.runtime.engine.tasks.restorer`), before any processor exists;
* **commit** (:mod:`rstreams.runtime.engine.tasks.commit`, a committer per task, and
  :func:`commit_tasks` here, which commits the tasks of a process together), whose
  exactly-once record is a typed
  :class:`~rstreams.runtime.engine.tasks.transaction.Transaction`.

Commit protocol
---------------
A commit gathers everything the task did since the last one: the records it produced
(per topic queue), the state changes of each store and the new input offsets. The task
asks each store stack to *flush* (the cache serializes what changed; the change-logging
layer takes it as changelog records), to *send* (the changelog records go to the
broker, or into the transaction) and to *write* (the changes reach the byte store in one
batch with the changelog offset they bring it to). Then:

* **at-least-once**: append the outputs, send and write each store's changes, commit
  the offsets. A crash in between replays the input since the last commit.
* **exactly-once**: first append the whole transaction as *one* record to the job's
  transaction topic (queue = the task's index) and make it durable: that is the commit
  point. Then apply it as above, marking the first record of every frame it appends
  with the header ``rs.txn = <task>:<seq>``. Nothing reaches an output topic before its
  transaction is committed, so readers never see uncommitted output. If the worker dies
  while applying, the task's next owner finds the last transaction not fully applied
  (its offsets are not the committed ones) and applies it again, skipping every frame
  whose marker is already in its queue (searched from the queue end noted in the
  transaction): no record is lost or written twice. The stores are written last, once
  the changelog records are durable.

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
import functools
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from rstreams.errors import ConfigError, IllegalStateError, RStreamsError, StateStoreError
from rstreams.planner.topology import SubTopology, Topology
from rstreams.runtime.engine.operators.context import EngineConfig, StreamContext
from rstreams.runtime.engine.operators.processors import Processor, SourceProcessor
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.engine.operators.registry import PROCESSORS
from rstreams.runtime.engine.operators.watermarks import (
    NO_TIME,
    TIMED_KINDS,
    Positions,
    decode_control,
    encode_control,
    ingest_group,
    producer_time_group,
)
from rstreams.runtime.engine.tasks.commit import Commit, Committer, KeptTimes
from rstreams.runtime.engine.tasks.faults import maybe_crash
from rstreams.runtime.engine.tasks.lifecycle import Lifecycle, TaskState
from rstreams.runtime.engine.tasks.restorer import (
    REBUILD_ADVICE,
    Restorer,
    discard_damaged_store,
)
from rstreams.runtime.engine.tasks.taskid import TaskId
from rstreams.runtime.engine.tasks.transaction import TXN_HEADER
from rstreams.runtime.inputs import InputLocator
from rstreams.runtime.layout import store_dir
from rstreams.runtime.queues.base import RecordColumns
from rstreams.runtime.queues.broker import Broker
from rstreams.semantics.clock import RESEND_WATERMARK_MS, StepClock, plan_clock
from rstreams.serde import INTERNAL_SERDE
from rstreams.state.metered import MeteredStore, store_stack
from rstreams.state.stores import KeyValueStore, MemoryStore, StoreDamagedError

__all__ = [
    "REBUILD_ADVICE",
    "RESEND_WATERMARK_MS",
    "TXN_HEADER",
    "InputEnds",
    "Task",
    "TaskState",
    "commit_tasks",
    "discard_damaged_store",
    "relieve_memory",
    "transactions_topic",
]

Fetch = Callable[[str, int, int, int], RecordColumns]

#: Records one broker transaction of a worker's commit holds before the next task's
#: commit goes into another: a Redis script blocks the server while it runs (other
#: clients get BUSY replies past ``lua-time-limit``, 5 s by default).
MAX_TRANSACTION_RECORDS = 20_000
#: ``TaskState.RUNNING`` once: an enum member read from its class costs ten times a
#: global, and the per-record paths test it.
_RUNNING = TaskState.RUNNING


def commit_tasks(tasks: Collection[Task], broker: Broker) -> list[tuple[str, int]]:
    """Commit several tasks of a process together (group commit): every task's
    transaction is appended, then all are made durable with one flush (each file is
    synced once, however many tasks wrote to it), then all outputs are written and made
    durable with one more, then offsets are committed. Returns the queues written to.

    Any error on the way (a full disk, an I/O error, a store that can not be written)
    fails every one of the tasks: a task's first phase takes its outputs and state
    changes out of it, so a later commit of that task would move its input positions
    past them with nothing written. Its next owner finishes or drops the transaction
    that was cut short, exactly (``Committer.recover``), and goes on from there."""
    begun: list[tuple[Task, Commit]] = []
    try:
        begun = _begin_commits(tasks, broker)
        if not begun:
            return []
        broker.flush()  # exactly-once: the commit point of every transaction
        for t, c in begun:
            t._commit_apply(c)
        if any(c.txn is not None for _, c in begun):
            broker.flush()
        # Every task's offsets at once (on the file log, their files synced together).
        offsets = [o for t, c in begun for o in t.committer.offset_commits(c, t.positions)]
        broker.commit_many(offsets)
        for t, c in begun:
            t._commit_end(c)
    except BaseException:
        for t in tasks:
            t.mark_failed()  # nothing more of it is committed
        raise
    return [q for _, c in begun for q in c.written]


def _begin_commits(tasks: Collection[Task], broker: Broker) -> list[tuple[Task, Commit]]:
    """Every task's first phase. Fenced commits (Redis) join a broker transaction,
    applied all or nothing (every fence in it checked first) in one round trip: one for
    all the tasks, or one per MAX_TRANSACTION_RECORDS records (a task's commit is never
    split)."""
    begun: list[tuple[Task, Commit]] = []
    transaction = getattr(broker, "transaction", None)
    if transaction is None:
        for t in tasks:
            if (c := t._commit_begin()) is not None:
                begun.append((t, c))
        return begun
    todo = list(tasks)
    while todo:
        with transaction() as tx:  # applied when the block ends
            while todo and tx.records < MAX_TRANSACTION_RECORDS:
                t = todo.pop(0)
                if (c := t._commit_begin(tx)) is not None:
                    begun.append((t, c))
    return begun


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


class Task:
    """Runs sub-topology ``sub`` on queue ``queue`` of every topic it reads.

    Built in phase 3, in this order: the stores of this queue are opened; the previous
    owner's unfinished transaction, if any, is completed; the stores are restored from
    their changelogs; only then are fresh processors built from the factories and
    initialized. A processor's ``init()`` rebuilds what it keeps in memory (window and
    join indexes, stream time) from the restored store, so nothing a processor holds
    can predate its queue's state.

    Its :attr:`state` follows :mod:`~rstreams.runtime.engine.tasks.lifecycle`: RESTORING
    while built, then RUNNING until it fails or is closed.
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
        fence: Callable[[], tuple[str, str]] | None = None,
    ) -> None:
        self.id = str(TaskId(sub.id, queue))  # its name on disk and in transactions
        self.lifecycle = Lifecycle(self.id)
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
        self.txn_queue = txn_queue
        self.committer = Committer(
            self.id, queue, group, broker, producer, transactions_topic(topology.job_id),
            txn_queue if self.exactly_once else None, fence,
        )  # fmt: skip
        self.fetch: Fetch = fetch or broker.read_columns
        self.changelogs = {name: topology.stores[name].changelog_topic for name in sub.stores}
        #: The task's stores, each the top of its stack of layers.
        self.stores: dict[str, MeteredStore] = {}
        discarded: set[str] = set()
        self.lifecycle.to(TaskState.RESTORING)
        while True:
            try:
                self._build(topology, sub, producer, clock)
                break
            except StoreDamagedError as e:
                if e.path is None or e.path in discarded:
                    self.abandon()
                    raise  # a new copy is damaged too: not the store's files
                self._close_stores()  # a RocksDB store stays locked until closed
                discarded.add(e.path)
                discard_damaged_store(e, config.state_dir, f"task {self.id}")
            except BaseException:
                self.abandon()
                raise
        self.positions = {t: broker.committed(group, t, queue) for t in self.sources}
        self.committer.committed = dict(self.positions)
        self.lifecycle.to(TaskState.RUNNING)

    def _build(
        self, topology: Topology, sub: SubTopology, producer: Producer, clock: Callable[[], int]
    ) -> None:
        """Open the stores, finish the last transaction, restore, build the processors."""
        self.stores = {}
        for name in sub.stores:
            self.stores[name] = store_stack(
                self._open_store(name),
                INTERNAL_SERDE,
                topology.stores[name].serde,
                self.changelogs[name],
                self.queue,
                self.committer.log,
                max_entries=self.config.cache_entries,
            )
        #: What this task had sent up to its last commit (exactly-once: kept in its
        #: transactions), so that a new owner goes on from there.
        self._restored_times = (NO_TIME, NO_TIME)
        if self.exactly_once:
            # Its changelog records, if any, are restored next.
            self._restored_times = self.committer.recover() or self._restored_times
        #: Per told topic, the time it told that step then (exactly-once; a topic
        #: missing: a transaction from before they were kept, see _init_clock).
        self._restored_told = self.committer.restored_told
        started = time.monotonic()
        restorer = Restorer(self.id, self.queue, self.broker, self.on_restore)
        self.restored = restorer.restore(self.stores, self.changelogs)
        self.restore_seconds = time.monotonic() - started
        # Processors only now, on restored state: built earlier, they would have
        # rebuilt their indexes and stream time from stores still empty.
        self._build_processors(topology.job_id, producer, clock)

    def _close_stores(self) -> None:
        """Close every store without writing anything (a failed task, damage): errors
        closing a damaged store are not the error to report."""
        for s in self.stores.values():
            with contextlib.suppress(StateStoreError):
                s.close()

    @property
    def state(self) -> TaskState:
        """Where the task is in its life (see :mod:`~rstreams.runtime.engine.tasks.lifecycle`)."""
        return self.lifecycle.state

    @property
    def failed(self) -> bool:
        """Processing or a commit raised, or the task was abandoned: nothing of it is
        committed after that, so the failed record (and everything after it) is read
        again on restart."""
        return self.lifecycle.state in (TaskState.FAILED, TaskState.ABANDONED)

    def mark_failed(self) -> None:
        """Commit nothing more of this task (a commit it took part in, or the disk,
        failed). A no-op on a task already failed or closed."""
        self.lifecycle.fail()

    def abandon(self) -> None:
        """Close without committing anything (damaged state was found): the task's next
        owner restores its state and goes on from its last commit."""
        self.lifecycle.to(TaskState.ABANDONED)
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
        # Records of the topics that input files are appended to (not shuffles).
        self._input_topics = [t for t in self.sources if self.topology.topics[t].role != "shuffle"]
        if self._input_topics:
            self.ctx.locate = InputLocator(self.broker, self._input_topics).locate
        self._init_clock()
        for p in self.processors:
            p.init(self.ctx)
        # The processors with something to do at a commit (most have nothing).
        self._flushing = [p for p in self.processors if p.holds]
        #: Whether prepare_commit has anything to do (the test driver skips the others).
        self.prepares = bool(self._flushing or self.marked_outputs or self.ctx.tell or self.stores)

    def _init_clock(self) -> None:
        """This task's stream time (:class:`~rstreams.semantics.clock.StepClock`):
        which inputs carry watermarks or told times, which outputs must, from the
        topology and the queue counts."""
        topology, config = self.topology, self.config
        reads_files = config.caught_up_idle and len(self._input_topics) == len(self.sources)
        plan = plan_clock(
            topology, self.sub, self.queue, self.sources, self.broker.queue_count,
            watermarks=config.watermarks, reads_files=reads_files, idle_ms=config.source_idle_ms,
        )  # fmt: skip
        probe = _BrokerProbe(self.broker, topology.job_id) if config.caught_up_idle else None
        self.step_clock = StepClock(plan, self.clock(), probe, self._restored_times)
        self.ctx.watermark = self.step_clock.value
        #: Inputs whose records need nothing but processing: no control records among
        #: them, no idleness to follow (see one_record).
        self._plain_inputs = set(self.sources) - plan.marked - set(plan.told)
        if plan.idle_ms is not None:
            self._plain_inputs.clear()
        # (Any: their stream time, max_time, is theirs, not every processor's.)
        self._timed: list[Any] = [p for p in self.processors if p.kind in TIMED_KINDS]
        self.marked_outputs = plan.outputs
        # The largest timestamp sent, as of the last commit of an earlier owner, and per
        # told topic what was sent to it: its step's time from this task (a transaction
        # written before those were kept has only the largest, a bound of each).
        self.ctx.out_time = self._restored_times[0]
        for topic, _, slack in plan.tells:
            self.ctx.tell[topic] = functools.partial(self._tell, topic)
            self.ctx.told_slack[topic] = slack
            self.ctx.told_time[topic] = self._restored_told.get(topic, self.ctx.out_time)
        #: At least once, a task that tells its time keeps it with its offsets, per topic.
        self._kept_times: KeptTimes | None = None
        if self.ctx.tell and not self.exactly_once:
            group = producer_time_group(topology.job_id)
            self._kept_times = KeptTimes(self.broker, group, self.queue, self.ctx.told_time)
            self.ctx.out_time = max(self.ctx.out_time, *self.ctx.told_time.values())

    # -- stream time ---------------------------------------------------------------------

    @property
    def watermark(self) -> int:
        """This task's watermark: nothing it sends from now on is older (END once its
        bounded input is over)."""
        return self.step_clock.watermark(self.ctx.out_time)

    def _send_marks(self, again: bool = False) -> None:
        """Send what the clock says is due, after the records it follows (in the same
        transaction): its watermark to the consumers of its marked shuffles (not while
        a processor holds records back: they go first, at commit), its time to every
        queue of a told shuffle that has not reached it."""
        clock, out_time = self.step_clock, self.ctx.out_time
        me, send = (self.sub.id, self.queue), self.producer.send
        if clock.plan.tells:
            for topic, q, time, high in clock.tells_due(self.ctx.told_time):
                send(topic, q, None, encode_control(me, time, False, high), 0, ())
        if not self.marked_outputs:
            return
        holding = any(p.held() for p in self.processors)
        mark = clock.outgoing(out_time, self.clock(), holding, again)
        if mark is not None:
            value = encode_control(me, *mark)
            for topic, n in self.marked_outputs:
                for q in range(n):
                    send(topic, q, None, value, 0, ())

    def _tell(self, topic: str, queue: int, time: int) -> None:
        """Tell queue ``queue`` of ``topic`` this task's time, before a record behind it."""
        high = self.step_clock.tell(topic, queue, time)
        if high is not None:
            value = encode_control((self.sub.id, self.queue), time, False, high)
            self.producer.send(topic, queue, None, value, 0, ())

    def _on_control(self, value: bytes | None, topic: str) -> None:
        c = decode_control(value)
        clock = self.step_clock
        if topic in clock.plan.told:
            told = clock.told(topic, c.watermark, c.high)
            for p in self._timed:
                if told > p.max_time:
                    p.max_time = told
                    p.on_watermark()
        elif clock.mark(c.producer, c.watermark, c.idle, c.high, c.caught_up, topic):
            self._watermark_moved()

    def _watermark_moved(self) -> None:
        self.ctx.watermark = self.step_clock.value
        for p in self.processors:
            p.on_watermark()

    # -- state ---------------------------------------------------------------------------

    def _open_store(self, name: str) -> KeyValueStore:
        if self.config.state == "rocksdb":
            from rstreams.state.rocksdb import RocksDBStore

            if self.config.state_dir is None:
                raise RStreamsError("RocksDB state needs EngineConfig.state_dir")
            path = store_dir(self.config.state_dir, name, self.queue)
            return RocksDBStore(path, name, self.config.rocksdb)
        return MemoryStore(name)

    # -- processing ----------------------------------------------------------------------

    def lag(self, ends: InputEnds | None = None) -> int:
        """Records of its input queues not read yet (``ends``: theirs, asked of the
        broker with other tasks'; else asked now, in one call)."""
        if ends is None:
            ends = InputEnds(self.broker, (self,))
        return sum(ends[(t, self.queue)] - pos for t, pos in self.positions.items())

    def poll(self, max_records: int) -> int:
        """Process up to ``max_records`` new records of each input queue."""
        n = 0
        for topic, pos in self.positions.items():
            records = self.fetch(topic, self.queue, pos, max_records)
            if len(records):
                self.positions[topic] = records.last_offset + 1
                self.process_records(topic, records)
                n += len(records)
        return n

    def process_records(self, topic: str, records: RecordColumns) -> None:
        """Process ``records``, the next ones of ``topic`` (the caller has moved the
        position past them): a poll's, or the test driver's record at a time."""
        # ``with self.lifecycle``, inline (two calls less for every driver record).
        lifecycle = self.lifecycle
        if lifecycle.state is not _RUNNING:
            lifecycle.check()
        try:  # an error fails the task
            source, clock = self.sources[topic], self.step_clock
            plan = clock.plan
            unmarked = topic not in plan.marked
            if unmarked and (clock.idle or plan.idle_ms is not None):
                clock.input_came(self.clock())
            if (
                unmarked and topic not in plan.told
            ) or None not in records.keys:  # no control record among them
                source.process_log(self.queue, records)
            else:
                keys, start = records.keys, 0
                for i, k in enumerate(keys):
                    if k is None:
                        if i > start:
                            source.process_log(self.queue, records.slice(start, i))
                        self._on_control(records.values[i], topic)
                        start = i + 1
                if start < len(keys):
                    source.process_log(self.queue, records.slice(start, len(keys)))
            if self.marked_outputs or plan.tells:
                self._send_marks()
        except BaseException:
            lifecycle.fail()
            raise

    def one_record(self, topic: str) -> Callable[..., None] | None:
        """How the test driver hands this task one record of ``topic`` as stored, with
        no columns built: ``(queue, offset, timestamp, key, value, headers)`` to its
        source, for an input without watermarks or idleness to follow while the task
        runs and is not idle (an error then fails the task, as :meth:`process_records`
        would). None: such records go through :meth:`process_records`."""
        if topic not in self._plain_inputs or self.marked_outputs or self.ctx.tell:
            return None
        return self.sources[topic].process_one

    def process_next(self, topic: str) -> None:
        """Process exactly one record: the next one of ``topic`` (used by the test driver)."""
        pos = self.positions[topic]
        records = self.broker.read_columns(topic, self.queue, pos, 1)
        if len(records):
            self.positions[topic] = records.last_offset + 1
            self.process_records(topic, records)

    def punctuate(self, now: int, ends: InputEnds | None = None) -> None:
        """Wall-clock driven work of the processors (e.g. closing idle windows);
        ``ends``: see :meth:`lag`."""
        with self.lifecycle:  # an error fails the task
            for p in self.processors:
                p.punctuate(now)
            clock = self.step_clock
            if clock.punctuate(now, lambda: self.lag(ends), tuple(sorted(self.positions.items()))):
                self._watermark_moved()
            self._send_marks(clock.resend_due(now))

    def end_of_input(self) -> None:
        """Bounded input is over for this task's inputs: let processors finish."""
        with self.lifecycle:  # an error fails the task
            for p in self.processors:
                p.end_of_input()
            for p in self.processors:
                p.flush()  # what waits for a commit goes before the final watermark
            self.step_clock.end()
            self._send_marks()

    def input_ended(self) -> None:
        """End of input was declared, and handled by an earlier owner of this task:
        its watermark is infinite again (its consumers may have lost it)."""
        self.step_clock.end()
        self._send_marks()

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
    def committed(self) -> dict[str, int]:
        """The input offsets committed last."""
        return self.committer.committed

    @property
    def uncommitted(self) -> bool:
        """Input was processed since the last commit."""
        return self.positions != self.committed

    def commit(self) -> list[tuple[str, int]]:
        """Commit what was done since the last commit; returns the queues written to."""
        return commit_tasks([self], self.broker)

    def prepare_commit(self) -> None:
        """The first steps of a commit, writing nothing: processors flush (what they
        hold goes out now) and stores serialize their changes for the changelog, so a
        value that can not be stored fails now, as the commit would. The next
        :meth:`commit` sends and writes them. The test driver prepares after every
        piped record, and commits when its state is read (a commit per record would
        cost more than the record)."""
        lifecycle = self.lifecycle
        if lifecycle.state is not _RUNNING:  # (the driver prepares every pipe)
            if self.failed:
                return
            lifecycle.check()
        if self.committer.exactly_once:
            raise ConfigError(f"task {self.id}: a commit is prepared only at least once")
        try:  # an error fails the task, as it would fail the commit
            for p in self._flushing:
                p.flush()
            if self.marked_outputs or self.ctx.tell:
                self._send_marks()
            now = self.clock()
            for store in self.stores.values():
                # (A full cache stays: the changes it holds are not written yet.)
                store.prepare(now)
        except BaseException:
            lifecycle.fail()
            raise

    def store_preparers(self) -> list[Callable[[int], None]] | None:
        """All :meth:`prepare_commit` does while the task runs, as calls of the clock
        time for its stores to make (the test driver makes them itself); None when it
        does more (processors to flush, watermarks to send)."""
        if self._flushing or self.marked_outputs or self.ctx.tell or self.committer.exactly_once:
            return None
        return [store.prepare for store in self.stores.values()]

    def write_prepared(self) -> None:
        """Write the changes prepared commits took and no commit has written (at least
        once): for a task that failed since, as those commits would have written them
        before the failure (a failed task commits nothing more)."""
        for store in self.stores.values():
            if store.pending:
                store.send()
                store.write()

    def _commit_begin(self, tx: Any = None) -> Commit | None:
        """First phase of a commit: flush processors, then the committer's first phase
        (see :class:`~rstreams.runtime.engine.tasks.commit.Committer`; ``tx``: the worker's
        broker transaction, if any)."""
        if self.state is TaskState.FAILED:
            return None
        if self.state is not TaskState.RUNNING:
            raise IllegalStateError(f"task {self.id} is {self.state.name}: it can not commit")
        maybe_crash("commit-start")
        for p in self._flushing:
            p.flush()  # coalesced updates go out now
        self._send_marks()  # after them, in the same transaction
        # (an error fails the task: see commit_tasks)
        return self.committer.begin(
            self.clock(),
            self.stores.values(),
            self.positions,
            (self.ctx.out_time, self.step_clock.high),
            tx,
            self.ctx.told_time,
        )

    def _commit_apply(self, c: Commit) -> None:
        self.committer.apply(c)

    def _commit_end(self, c: Commit) -> None:
        self.committer.end(c, self.stores.values(), self.positions)
        if self._kept_times is not None:
            self._kept_times.commit(self.ctx.told_time)

    def close(self) -> None:
        """Commit (unless the task failed), close the processors and the stores. A
        no-op on a closed task."""
        if self.state in (TaskState.CLOSED, TaskState.ABANDONED):
            return
        try:
            self.commit()
            for p in self.processors:
                p.close()
        except BaseException:
            self.abandon()
            raise
        if self.failed:  # the error that failed it is the one to report
            self.abandon()
            return
        self.lifecycle.to(TaskState.CLOSED)
        for s in self.stores.values():
            s.close()


class InputEnds:
    """The end offsets of the input queues of ``tasks``, asked of the broker in one call
    (one round trip on Redis) when first needed, then kept: a snapshot for one pass of
    a worker's loop over its tasks (their lag, whether they are idle)."""

    def __init__(self, broker: Broker, tasks: Iterable[Task]) -> None:
        self._broker = broker
        self._tasks = tasks
        self._ends: dict[tuple[str, int], int] | None = None

    def __getitem__(self, queue: tuple[str, int]) -> int:
        if self._ends is None:
            queues = list({(t, task.queue): None for task in self._tasks for t in task.positions})
            self._ends = dict(zip(queues, self._broker.end_offsets(queues), strict=True))
        return self._ends[queue]


class _BrokerProbe:
    """Answers a consumer's questions about caught-up producers' source queues (see
    :class:`~rstreams.runtime.engine.operators.watermarks.SourceProbe`) from the broker."""

    def __init__(self, broker: Broker, job_id: str) -> None:
        self.broker = broker
        self.group = ingest_group(job_id)

    def at_end(self, queries: Sequence[tuple[int, Positions]]) -> list[bool]:
        queues = [(t, queue) for queue, positions in queries for t, _ in positions]
        ends = iter(self.broker.end_offsets(queues) if queues else [])
        return [all(next(ends) == pos for _, pos in positions) for _, positions in queries]

    def ingest_ended(self, caught_up: Sequence[tuple[int, Positions]]) -> bool:
        # Only what the ingest recorded counts: a queue it never recorded is not ended,
        # even at position 0 (the ingest may not have started).
        ends = self.broker.group_offsets(self.group)
        return all(ends.get((t, q)) == pos for q, positions in caught_up for t, pos in positions)
