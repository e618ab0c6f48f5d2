"""A worker process of the embedded runtime.

A worker joins the job's consumer group, gets a share of the tasks (one task per
sub-topology per queue) from the allocation strategy, and for each task it owns: takes
the task's lock, restores its state from the changelog, starts pulling agents for its
input queues and runs the processor chain on what they pull. It commits on an interval
and whenever it gives a task up. Rebalances happen on start, when the group's
generation moves (a member joined, left or died) and every ``rebalance_interval``.

:meth:`Worker.step` is one turn of its loop at a time the caller gives, with every
timer of the worker held in a :class:`Deadlines` record; :meth:`Worker.run` joins, calls
it until stopped (waiting a little when a turn found nothing to do) and leaves.

Run one with ``python -m rstreams.runtime.engine.coordination.workerprocess CONFIG.json`` (a
:class:`~rstreams.runtime.engine.coordination.launch.WorkerLaunch`); ``rstreams run`` starts and
supervises them, giving each its configuration on its standard input.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any

import attrs

from rstreams.config import WorkerConfig
from rstreams.errors import FencedError
from rstreams.planner.topology import Topology
from rstreams.runtime.engine.coordination.exitreport import EXIT_FATAL as EXIT_FATAL
from rstreams.runtime.engine.coordination.exitreport import (
    EXIT_PROCESSING_ERROR as EXIT_PROCESSING_ERROR,
)
from rstreams.runtime.engine.coordination.local import create_topics, task_index
from rstreams.runtime.engine.coordination.stats import StatsPublisher
from rstreams.runtime.engine.coordination.taskfiles import TaskFiles
from rstreams.runtime.engine.coordination.taskfiles import restore_dir as restore_dir
from rstreams.runtime.engine.coordination.taskfiles import restore_progress as restore_progress
from rstreams.runtime.engine.coordination.taskfiles import skipped_at as skipped_at
from rstreams.runtime.engine.io.agent import AgentPool, PullingAgent, QueueCache
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.engine.operators.record import wall_clock_ms
from rstreams.runtime.engine.tasks.lifecycle import WORKER_TRANSITIONS, StateMachine, WorkerState
from rstreams.runtime.engine.tasks.task import (
    InputEnds,
    Task,
    commit_tasks,
    discard_damaged_store,
    relieve_memory,
)
from rstreams.runtime.engine.tasks.taskid import TaskId
from rstreams.runtime.engine.tasks.trim import (
    CompactionCheck,
    purge_consumed,
    records_held,
    trims_after_commit,
)
from rstreams.runtime.layout import GroupLayout
from rstreams.runtime.queues.base import RecordColumns
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.queues.brokers import open_broker as open_broker
from rstreams.runtime.queues.brokers import (
    open_membership,
)
from rstreams.runtime.queues.eoiflags import EoiFlags, FileEoiFlags
from rstreams.runtime.rebalance import (
    AllocateStrategy,
    MessageQueue,
    allocate_by_topic,
    get_strategy,
)
from rstreams.runtime.rebalance.group import GroupMembership
from rstreams.state.stores import StoreDamagedError, StoreLockedError

log = logging.getLogger("rstreams.worker")

#: Rebuilds of damaged state a worker makes in a row, without a commit between them,
#: before it gives up (the damage is not in the store's files: the disk, a bug...).
MAX_REBUILDS = 3


def new_member_id() -> str:
    """A member id of its own: host, pid and a random part."""
    return f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def task_queue(job_id: str, task: TaskId) -> MessageQueue:
    """The queue that stands for ``task`` in the allocation: topic ``<job>-<sub-topology>``.
    Consistent hashing hashes its text, so it must stay the same for the allocation to.

    >>> str(task_queue("wc", TaskId(1, 0)))
    'MessageQueue [topic=wc-1, brokerName=local, queueId=0]'
    """
    return MessageQueue(f"{job_id}-{task.subtopology}", "local", task.queue)


@attrs.define
class Deadlines:
    """When each periodic job of a worker is next due, on the clock :meth:`Worker.step`
    is given (``time.monotonic()`` seconds in :meth:`Worker.run`).

    >>> Deadlines.starting(100.0, WorkerConfig(maintenance_interval=30.0))
    Deadlines(heartbeat=100.0, rebalance=100.0, punctuate=100.0, commit=100.0, maintenance=130.0)
    """

    #: Heartbeat to the group, see who else is alive, check the supervisor still is.
    heartbeat: float
    #: Rebalance even if the group's generation did not move.
    rebalance: float
    #: Punctuate the tasks (wall-clock windows) and look for end-of-input marks.
    punctuate: float
    #: Commit. A turn that finds its input dry commits early, once a tenth of the
    #: interval has passed since the last commit.
    commit: float
    #: Purge consumed shuffle records, compact changelogs, apply retention.
    maintenance: float

    @classmethod
    def starting(cls, now: float, config: WorkerConfig) -> Deadlines:
        """At join: everything but maintenance is due at once."""
        return cls(
            heartbeat=now,
            rebalance=now,
            punctuate=now,
            commit=now,
            maintenance=now + config.maintenance_interval,
        )


class Worker:
    """Runs its share of a topology's tasks until stopped: :meth:`run`, or :meth:`join`,
    :meth:`step` as often as wanted on a clock of the caller's, then :meth:`leave`.

    >>> import shutil, tempfile
    >>> from rstreams import StreamBuilder
    >>> b = StreamBuilder("up")
    >>> b.source("in", queues=1).map(str.upper).sink("out")
    >>> root = tempfile.mkdtemp()
    >>> broker = open_broker(root)
    >>> worker = Worker(b.build(), broker, root, member_id="w")
    >>> broker.append("in", 0, [(0, None, b"hello", ())])
    0
    >>> worker.join(now=0.0)
    >>> worker.step(now=0.0)  # takes the only task, processes and commits its record
    1
    >>> [r.value for r in broker.read("out", 0, 0)], broker.committed("up", "in", 0)
    ([b'"HELLO"'], 1)
    >>> worker.leave(); broker.close(); shutil.rmtree(root)
    """

    def __init__(
        self,
        topology: Topology,
        broker: Broker,
        root: str | os.PathLike[str],
        *,
        member_id: str | None = None,
        engine: EngineConfig | None = None,
        config: WorkerConfig | None = None,
        strategy: AllocateStrategy | None = None,
        membership: GroupMembership | None = None,
        eoi: EoiFlags | None = None,
    ) -> None:
        """``membership`` (a group membership of this worker; default: files under
        ``root``) and ``eoi`` (end-of-input flags; default: files) are given on Redis."""
        self.topology = topology
        self.broker = broker
        #: CREATED, RUNNING once joined, STOPPING once asked to stop, FAILED, LEFT.
        self.lifecycle = StateMachine("worker", WORKER_TRANSITIONS, WorkerState.CREATED)
        #: Consumed shuffle records are purged, and changelogs checked for compaction,
        #: after every commit (not only at maintenance): the broker holds them in memory.
        self._trim = trims_after_commit(broker)
        self.engine = engine or EngineConfig(coalesce=True, combine=True)
        self.config = config or WorkerConfig()
        self._compaction = CompactionCheck(self.config.compact_min_records)
        self.strategy = strategy or get_strategy(self.config.allocation)
        self.group = topology.job_id
        self.member_id = member_id or new_member_id()
        self.membership = membership or open_membership(
            root, self.group, self.member_id, self.config.session_timeout
        )
        #: This host's files of the group (statistics, restore progress, skip counts).
        self.group_layout = GroupLayout.of(root, self.group)
        self.eoi = eoi or FileEoiFlags(self.group_layout)
        #: Commits are fenced by task ownership where the membership gives a fence.
        self._fenced = self.membership.fences_commits
        self._renewed = time.monotonic()  # (real time: see _renew_lease)
        self.queue_counts = create_topics(topology, broker, self.engine)
        #: Every task of the topology, with its transaction queue.
        self.task_index = task_index(topology, self.queue_counts)
        #: Every task as the allocation strategies see it.
        self.all_tasks = {task_queue(self.group, t): t for t in self.task_index}
        self.exactly_once = self.engine.guarantee == "exactly-once"
        self.pool = AgentPool()
        self.tasks: dict[TaskId, Task] = {}
        self.wanted: list[TaskId] = []
        self.stop_event = threading.Event()
        #: Supervised workers stop when their supervisor dies (no orphans).
        self.parent_pid: int | None = None
        self._generation = -1
        self.processed = 0
        #: The files of its tasks' restore progress and skip counts, for the supervisor.
        self.files = TaskFiles(self.group_layout)
        #: Damaged stores rebuilt since the last commit that wrote anything.
        self._rebuilds = 0
        #: The loop's timers; :meth:`join` sets them again.
        self.due = Deadlines.starting(time.monotonic(), self.config)
        #: What this worker publishes for `rstreams top` and --metrics-port.
        self.stats = StatsPublisher(self.group_layout.dir, self.member_id)

    # -- tasks ---------------------------------------------------------------------------

    def _start_task(self, task_id: TaskId) -> None:
        sub = self.topology.subtopologies[task_id.subtopology]
        queue = task_id.queue
        name = str(task_id)  # the consumer of the task's queue caches
        caches: dict[str, QueueCache] = {}

        def fetch(topic: str, q: int, offset: int, max_records: int) -> RecordColumns:
            return caches[topic].take(name, max_records)

        # Each task has its own producer: a transaction carries that task's output only.
        task = Task(
            self.topology, sub, queue, self.broker, Producer(self.broker), self.engine,
            self.group, wall_clock_ms, fetch=fetch, txn_queue=self.task_index[task_id],
            on_restore=self._restore_progress, fence=self._fence_of(task_id),
        )  # fmt: skip
        for topic, pos in task.positions.items():
            cache = QueueCache(self.config.cache_records, pos, [name])
            caches[topic] = cache
            agent = PullingAgent(
                self.broker,
                topic,
                queue,
                cache,
                batch=self.config.pull_batch,
                pull_interval=self.config.pull_interval,
            )
            self.pool.add(agent)
        self.tasks[task_id] = task
        self.files.started(task_id, dict(task.positions))
        log.info(
            "%s: started task %s (restored %d changelog records)",
            self.member_id,
            task_id,
            task.restored,
        )

    def _restore_progress(self, task: str, done: int, total: int) -> None:
        self.stats.restore_progress(task, done, total)
        self.files.restore_progress(task, done, total)

    def _publish_skipped(self, tasks: dict[TaskId, Task]) -> None:
        self.files.publish_skipped(tasks)

    def _let_go(self, task_id: TaskId, task: Task) -> None:
        """Forget what this worker keeps per task of a task that leaves it (stopped or
        abandoned): its queues' pulls, its changelogs' key counts, its skipped count."""
        for topic in task.positions:
            self.pool.remove(topic, task.queue)
        self._compaction.forget_all(task.changelogs.values(), task.queue)
        self.files.forget(task_id)

    def _stop_task(self, task_id: TaskId) -> None:
        task = self.tasks.pop(task_id)
        self._publish_skipped({task_id: task})
        self._let_go(task_id, task)
        task.close()  # flush + commit before the lock goes
        if not task.failed:
            self.broker.flush()
        self.membership.release_task(str(task_id))
        log.info("%s: gave up task %s", self.member_id, task_id)

    def rebalance(self) -> None:
        members = self.membership.members()
        self._generation = self.membership.generation()
        # Each sub-topology on its own (a topic per sub-topology): every worker runs a
        # share of every stage, not some stages whole.
        mine = allocate_by_topic(
            self.strategy, self.group, self.member_id, list(self.all_tasks), members
        )
        self.wanted = sorted(self.all_tasks[mq] for mq in mine)
        for task_id in [t for t in self.tasks if t not in self.wanted]:
            self._stop_task(task_id)
        keep = {str(t) for t in self.wanted}
        for name in self.membership.held_tasks:
            if name not in keep:  # e.g. kept through a rebuild for a task no longer ours
                self.membership.release_task(name)
        log.debug(
            "%s: generation %d, members %s, tasks %s",
            self.member_id,
            self._generation,
            members,
            [str(t) for t in self.wanted],
        )

    def _claim_tasks(self) -> None:
        # A worker asked to stop takes no task: one taken over from a worker that left
        # first would start, commit and send its time again after the job's end.
        if self.stop_event.is_set():
            return
        for task_id in self.wanted:
            if task_id not in self.tasks and self.membership.acquire_task(str(task_id)):
                try:
                    self._start_task(task_id)
                except StoreLockedError:
                    if not self._fenced:
                        raise
                    # A worker of this host still runs it: it lost the task to this one
                    # (its lease ran out) and drops it at its next heartbeat.
                    log.info("%s: task %s is still open here; later", self.member_id, task_id)
                    self.membership.release_task(str(task_id))
                self._renew_lease()  # (a restore may take long)

    def commit(self) -> None:
        started = time.perf_counter()
        timed = any(t.uncommitted for t in self.tasks.values())  # not idle timer ticks
        self._publish_skipped(self.tasks)
        written = commit_tasks(list(self.tasks.values()), self.broker)
        self.broker.flush()
        if timed:
            self.stats.commit_took(time.perf_counter() - started)
        if written:
            self._rebuilds = 0
        if timed and self._trim:  # (the broker holds records in memory)
            purge_consumed(self.broker, self.topology, self.tasks.values())
            self._compact_changelogs()
        self.pool.wake(written)  # this worker's downstream tasks need not wait for a timer

    def _rebuild(self, error: StoreDamagedError) -> None:
        """A store's local copy turned out damaged while its task ran: drop every task
        of this worker without committing (a commit in progress may have stopped half
        way through the tasks), delete that copy, and let the loop build the tasks again
        (as after a rebalance: state restored from the changelogs, processing resumed
        from the last commit). The task locks are kept meanwhile. Raises ``error`` after
        MAX_REBUILDS rebuilds in a row without a commit."""
        self._rebuilds += 1
        if self._rebuilds > MAX_REBUILDS:
            for task in self.tasks.values():
                task.mark_failed()  # nothing more is committed
            self._failed()
            raise error
        log.warning(
            "%s: state store %r turned out damaged while running; dropping the %d task(s) "
            "of this worker without committing, to rebuild it from its changelog and go "
            "on from the last commit",
            self.member_id, error.store, len(self.tasks),
        )  # fmt: skip
        self._drop_tasks(list(self.tasks))
        discard_damaged_store(error, self.engine.state_dir, self.member_id)

    def _drop_tasks(self, task_ids: list[TaskId], release: bool = False) -> None:
        """Stop tasks without committing anything (their next owner, maybe this worker
        again, goes on from their last commit); ``release``: give their locks up too."""
        for task_id in task_ids:
            task = self.tasks.pop(task_id, None)
            if task is not None:
                self._let_go(task_id, task)
                task.abandon()
            if release:
                self.membership.release_task(str(task_id))

    def _fenced_out(self, error: FencedError) -> None:
        """A commit was refused: another member owns a task of this worker now (this one
        was paused past its session). Drop every task uncommitted (their group commit
        failed them all) and let the next rebalance say which are still ours."""
        log.warning(
            "%s: %s; dropping its %d task(s) without committing", self.member_id, error,
            len(self.tasks),
        )  # fmt: skip
        self._drop_tasks(list(self.tasks), release=True)
        self._generation = -1  # rebalance on the next turn

    def _fence_of(self, task_id: TaskId) -> Any:
        """The fence of ``task_id``'s commits (a function giving (key, value)), if any."""
        if not (self._fenced and self.exactly_once):
            return None
        membership: Any = self.membership
        return lambda: membership.task_fence(str(task_id))

    def _end_of_input(self) -> None:
        """The supervisor declared bounded input over for a sub-topology (a control
        file): each of its tasks here finishes (closes windows...), commits, and says so."""
        eoi = self.eoi
        if not eoi.any_declared():
            return
        for task_id, task in list(self.tasks.items()):
            if not eoi.declared(task_id.subtopology):
                continue
            if not eoi.done(task_id):
                task.end_of_input()
            elif not task.step_clock.ended:
                task.input_ended()  # taken over after its end of input: say so again
            else:
                continue
            self._publish_skipped({task_id: task})
            task.commit()
            self.broker.flush()
            eoi.mark_done(task_id)

    def maintain(self) -> dict[str, int]:
        """Keep the log bounded: drop shuffle records every reader committed past (the
        job's own group is their only reader), compact the changelogs of owned tasks
        that hold many more records than keys, and apply topic retention."""
        done = {"purged_queues": 0, "compacted_records": 0, "retention_segments": 0}
        done["purged_queues"] = purge_consumed(self.broker, self.topology, self.tasks.values())
        done["compacted_records"] = self._compact_changelogs()
        done["retention_segments"] = self.broker.enforce_retention()
        return done

    def _compact_changelogs(self) -> int:
        """Compact each changelog of an owned task that holds many more records than its
        store has keys; the records removed."""
        removed = 0
        for task in self.tasks.values():
            for name, changelog in task.changelogs.items():
                records = records_held(self.broker, changelog, task.queue)
                if self._compaction.due(changelog, task.queue, task.stores[name], records):
                    removed += self.broker.compact(changelog, task.queue)
                    self._compaction.forget(changelog, task.queue)
        return removed

    # -- main loop -----------------------------------------------------------------------

    def run(self) -> None:
        """Join, work until :meth:`stop`, then commit and leave."""
        self.join(time.monotonic())
        try:
            while not self.stop_event.is_set():
                if not self.step(time.monotonic()):
                    self._idle()
        except BaseException as e:
            try:
                self.leave()
            except Exception as again:  # (on a full disk, leaving may fail too)
                log.warning("%s: leaving after %r failed too: %r", self.member_id, e, again)
            raise
        self.leave()

    def _idle(self) -> None:
        """Wait a little, or (where the membership pushes changes) until the group
        changes: the rebalance then happens at once."""
        self.membership.idle(self.config.idle_sleep, self.stop_event)

    def join(self, now: float) -> None:
        """Join the group (and start the pulling thread if ``agent_thread``); every timer
        but maintenance is due at ``now``. Then call :meth:`step`, and :meth:`leave`."""
        if self.lifecycle.state is not WorkerState.STOPPING:  # (asked to stop first: stays)
            self.lifecycle.to(WorkerState.RUNNING)
        self.membership.join()
        if self.config.agent_thread:
            self.pool.start()
        self.due = Deadlines.starting(now, self.config)

    def step(self, now: float) -> int:
        """One turn of the loop at time ``now`` (seconds on a clock that never goes back,
        the one :meth:`join` was given); returns the records it processed.

        In order: heartbeat and rebalance if due, claim the tasks this worker should
        own and that are free, pull, run one batch through each task, then punctuate,
        commit and maintain if due (see :class:`Deadlines`). If the supervisor is gone,
        it only sets :attr:`stop_event`. Damaged local state met on the way is rebuilt
        (all tasks dropped without a commit and built again on the next turns). An
        OSError (a full or failing disk) fails every task: :meth:`leave` then commits
        nothing.
        """
        try:
            if not self._keep_membership(now):
                return 0
            self._claim_tasks()
            processed = self._process(now)
            self.processed += processed
            self._run_timers(now, processed)
        except StoreDamagedError as e:
            self._rebuild(e)
            return 0
        except FencedError as e:
            self._fenced_out(e)
            return 0
        except OSError:
            # The disk failed (full, read-only, I/O error): commit nothing more, even of
            # tasks whose last commit went through (leaving would); their next owners go
            # on from there.
            for task in self.tasks.values():
                task.mark_failed()
            self._failed()
            raise
        # -- per-turn bookkeeping (counters, statistics) goes here ------------------------
        self.stats.publish(
            self.tasks, self.broker, processed=self.processed, generation=self._generation
        )  # at most once per second
        return processed

    def leave(self) -> None:
        """Stop pulling, give every task up (each commits first, unless one failed) and
        leave the group."""
        self.lifecycle.to(WorkerState.LEFT)
        self.pool.stop()
        failed = any(t.failed for t in self.tasks.values())
        for task_id in list(self.tasks):
            self._stop_task(task_id)
        if not failed:
            self.broker.flush()
        self.stats.close()
        self.membership.leave()

    def _keep_membership(self, now: float) -> bool:
        """Heartbeat and rebalance when due; False (and stop) if the supervisor is gone."""
        cfg, due = self.config, self.due
        if now >= due.heartbeat:
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                log.warning("%s: the supervisor is gone; stopping", self.member_id)
                self.stop()
                return False
            self.membership.heartbeat()
            lost = self.membership.lost_tasks()
            if lost:  # taken by another member while this one was paused: never commit
                self._drop_tasks([TaskId.parse(t) for t in lost], release=True)
            due.heartbeat = now + cfg.heartbeat_interval
            # Liveness check of the others: a dead member bumps the generation.
            self.membership.members()
        if self.membership.generation() != self._generation or now >= due.rebalance:
            self.rebalance()
            due.rebalance = now + cfg.rebalance_interval
        return True

    def _renew_lease(self) -> None:
        """Leases in a broker run on real time, whatever clock :meth:`step` is given:
        renew them during a long turn (many tasks, big batches, restores), so that the
        session does not time out while this worker is busy, not hung."""
        if self._fenced and time.monotonic() - self._renewed >= self.config.heartbeat_interval:
            self.membership.heartbeat()
            self._renewed = time.monotonic()

    def _process(self, now: float) -> int:
        """Pull (unless a thread does), then one batch through each task."""
        cfg = self.config
        if self.pool.error is not None:
            raise self.pool.error
        if not cfg.agent_thread:
            self.pool.pull_all(now)  # the agents whose timer is due, or who were woken
        processed = 0
        for task_id, task in list(self.tasks.items()):
            if self.stop_event.is_set():
                break  # asked to stop: leave now, not after a batch of every task
            n = task.poll(cfg.batch_size)
            self._renew_lease()
            if not n:
                continue
            processed += n
            if task.wants_commit:
                # A full state cache: commit to bound memory.
                self._publish_skipped({task_id: task})
                task.commit()
            elif not self.exactly_once:
                # Output is visible at once; downstream tasks of this worker need not wait
                # for their timer. (Exactly-once output waits for its transaction.)
                self.pool.wake(task.producer.flush())
        if processed:
            self.pool.wake(relieve_memory(self.tasks.values(), self.engine.cache_entries))
        return processed

    def _run_timers(self, now: float, processed: int) -> None:
        cfg, due = self.config, self.due
        if now >= due.punctuate:
            wall = wall_clock_ms()
            ends = InputEnds(self.broker, list(self.tasks.values()))
            for task in self.tasks.values():
                task.punctuate(wall, ends)
            self._end_of_input()
            # Idle: look again soon (the end of a bounded run waits on this).
            due.punctuate = now + (0.1 if processed else 0.02)
        if now >= due.commit or (not processed and self._ran_dry(now)):
            self.commit()
            due.commit = now + cfg.commit_interval
        if now >= due.maintenance:
            log.debug("%s: maintenance %s", self.member_id, self.maintain())
            due.maintenance = now + cfg.maintenance_interval

    def _ran_dry(self, now: float) -> bool:
        """Input ran dry (not just a pull in flight) with work uncommitted: commit now,
        not at the timer, so output (which exactly-once shows only at commit) moves on at
        once; at most ten times per commit interval."""
        tasks = list(self.tasks.values())
        ends = InputEnds(self.broker, tasks)  # (one call for every task's queues)
        return (
            now >= self.due.commit - self.config.commit_interval * 0.9
            and any(t.uncommitted for t in tasks)
            and not any(t.lag(ends) for t in tasks)
        )

    @property
    def state(self) -> WorkerState:
        """Where this worker is: a ``WorkerState`` (tasks/lifecycle.py)."""
        return self.lifecycle.state

    def stop(self, *_: Any) -> None:
        """Ask the loop to stop (a signal handler's call: any time, more than once)."""
        if self.lifecycle.can(WorkerState.STOPPING):
            self.lifecycle.to(WorkerState.STOPPING)
        self.stop_event.set()

    def _failed(self) -> None:
        if self.lifecycle.can(WorkerState.FAILED):
            self.lifecycle.to(WorkerState.FAILED)
