"""A worker process of the embedded runtime.

A worker joins the job's consumer group, gets a share of the tasks (one task per
sub-topology per queue) from the allocation strategy, and for each task it owns: takes
the task's lock, restores its state from the changelog, starts pulling agents for its
input queues and runs the processor chain on what they pull. It commits on an interval
and whenever it gives a task up. Rebalances happen on start, when the group's
generation moves (a member joined, left or died) and every ``rebalance_interval``.

Run one with ``python -m rstreams.runtime.engine.worker PIPELINE.py --data-dir DIR``;
``rstreams run`` starts and supervises them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import attrs

from rstreams.errors import ProcessingError, RStreamsError
from rstreams.planner.topology import Topology
from rstreams.runtime import gctune
from rstreams.runtime.engine.agent import AgentPool, PullingAgent, QueueCache
from rstreams.runtime.engine.context import EngineConfig
from rstreams.runtime.engine.local import create_topics, task_index, wall_clock_ms
from rstreams.runtime.engine.producer import Producer
from rstreams.runtime.engine.task import (
    Task,
    commit_tasks,
    discard_damaged_store,
    relieve_memory,
)
from rstreams.runtime.queues.base import RecordColumns
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.queues.mapper import get_mapper
from rstreams.runtime.rebalance import (
    AllocateAveragely,
    AllocateStrategy,
    MessageQueue,
    get_strategy,
)
from rstreams.runtime.rebalance.membership import FileGroupMembership
from rstreams.state.stores import StoreDamagedError

log = logging.getLogger("rstreams.worker")

#: Exit code of a worker stopped by a record that failed processing (not restarted).
EXIT_PROCESSING_ERROR = 3
#: Exit code of a worker stopped by an error that a restart would meet again: a corrupt
#: log, an unreadable changelog, a value its serde can not write, a bad option... (not
#: restarted; the message is the last line the worker prints). An unexpected exception
#: (a bug, with its traceback) exits 1 and is restarted, as is a worker killed by a signal.
EXIT_FATAL = 4
#: Rebuilds of damaged state a worker makes in a row, without a commit between them,
#: before it gives up (the damage is not in the store's files: the disk, a bug...).
MAX_REBUILDS = 3


@attrs.frozen
class WorkerConfig:
    """Timing and sizing of a worker. Defaults suit a small machine."""

    session_timeout: float = 5.0
    heartbeat_interval: float = 0.5
    rebalance_interval: float = 20.0
    commit_interval: float = 1.0
    cache_records: int = 5_000
    pull_batch: int = 5_000
    pull_interval: float = 0.1
    batch_size: int = 5_000
    idle_sleep: float = 0.01
    #: Pull on a background thread rather than in the worker loop. Off: with CPython's
    #: GIL a pulling thread does not run beside processing, it takes turns with it, and
    #: the hand-overs cost more than they save (about 5% of a word count).
    agent_thread: bool = False
    #: How often a worker purges consumed shuffle records, compacts the changelogs of its
    #: tasks and applies retention.
    maintenance_interval: float = 30.0
    #: A changelog queue is compacted once it holds this many records more than twice
    #: its store's keys.
    compact_min_records: int = 10_000

    def __attrs_post_init__(self) -> None:
        if self.rebalance_interval < 1:
            raise ValueError(f"rebalance_interval must be >= 1 s; got {self.rebalance_interval}")


def task_ids(topology: Topology, queue_counts: dict[str, int]) -> list[MessageQueue]:
    """Every task of the topology as a MessageQueue(topic=job-subtopology, queue_id)."""
    out: list[MessageQueue] = []
    for sub in topology.subtopologies:
        n = max(queue_counts[t] for t in sub.source_topics)
        out.extend(MessageQueue(f"{topology.job_id}-{sub.id}", "local", q) for q in range(n))
    return out


class Worker:
    """Runs its share of a topology's tasks until stopped."""

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
    ) -> None:
        self.topology = topology
        self.broker = broker
        self.engine = engine or EngineConfig(coalesce=True, combine=True)
        self.config = config or WorkerConfig()
        self.strategy = strategy or AllocateAveragely()
        self.group = topology.job_id
        self.member_id = member_id or f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.membership = FileGroupMembership(
            root, self.group, self.member_id, self.config.session_timeout
        )
        self.queue_counts = create_topics(topology, broker, self.engine)
        self.all_tasks = task_ids(topology, self.queue_counts)
        self.task_index = task_index(topology, self.queue_counts)
        self.exactly_once = self.engine.guarantee == "exactly-once"
        self.pool = AgentPool()
        self.tasks: dict[str, Task] = {}
        self.wanted: list[str] = []
        self.stop_event = threading.Event()
        #: Supervised workers stop when their supervisor dies (no orphans).
        self.parent_pid: int | None = None
        self._generation = -1
        self.processed = 0
        #: Per task: [records skipped before this worker owned it, count last published].
        self._skipped: dict[str, list[int]] = {}
        #: Damaged stores rebuilt since the last commit that wrote anything.
        self._rebuilds = 0

    # -- tasks ---------------------------------------------------------------------------

    def _task_name(self, mq: MessageQueue) -> str:
        return f"{mq.topic.rsplit('-', 1)[1]}_{mq.queue_id}"

    def _start_task(self, name: str) -> None:
        sub_id, queue = (int(x) for x in name.split("_"))
        sub = self.topology.subtopologies[sub_id]
        caches: dict[str, QueueCache] = {}

        def fetch(topic: str, q: int, offset: int, max_records: int) -> RecordColumns:
            return caches[topic].take(name, max_records)

        # Each task has its own producer: a transaction carries that task's output only.
        task = Task(
            self.topology, sub, queue, self.broker, Producer(self.broker), self.engine,
            self.group, wall_clock_ms, fetch=fetch, txn_queue=self.task_index[name],
            on_restore=self._restore_progress,
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
        self.tasks[name] = task
        base = skipped_at(self.membership.dir, name, dict(task.positions))
        self._skipped[name] = [base, base]
        log.info(
            "%s: started task %s (restored %d changelog records)",
            self.member_id,
            name,
            task.restored,
        )

    def _restore_progress(self, task: str, done: int, total: int) -> None:
        """Publish a task's restore progress for the supervisor's progress line (a file
        per task under ``coordination/<job>/restore``, gone when the restore is done)."""
        path = restore_dir(self.membership.dir) / task
        if done >= total:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{task}.{os.getpid()}.tmp")
        tmp.write_text(f"{done} {total}")
        tmp.replace(path)

    def _publish_skipped(self, tasks: dict[str, Task]) -> None:
        """Before a commit: publish each task's count of skipped records with the
        positions the commit covers (read by :func:`skipped_at`). Keeps the count the
        last commit covered too, in case this commit never happens."""
        for name, task in tasks.items():
            counts = self._skipped.get(name)
            if counts is None:
                continue
            total = counts[0] + task.ctx.metrics["skipped"]
            if total == counts[1]:
                continue
            path = _skipped_path(self.membership.dir, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            entries = [*_read_skipped(path)[-1:], (dict(task.positions), total)]
            tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entries))
            tmp.replace(path)
            counts[1] = total

    def _stop_task(self, name: str) -> None:
        task = self.tasks.pop(name)
        for topic in task.positions:
            self.pool.remove(topic, task.queue)
        self._publish_skipped({name: task})
        self._skipped.pop(name, None)
        task.close()  # flush + commit before the lock goes
        self.broker.flush()
        self.membership.release_task(name)
        log.info("%s: gave up task %s", self.member_id, name)

    def rebalance(self) -> None:
        members = self.membership.members()
        self._generation = self.membership.generation()
        mine = self.strategy.allocate(self.group, self.member_id, self.all_tasks, members)
        self.wanted = sorted(self._task_name(mq) for mq in mine)
        for name in [t for t in self.tasks if t not in self.wanted]:
            self._stop_task(name)
        for name in self.membership.held_tasks:
            if name not in self.wanted and name not in self.tasks:
                self.membership.release_task(name)
        log.debug(
            "%s: generation %d, members %s, tasks %s",
            self.member_id,
            self._generation,
            members,
            self.wanted,
        )

    def _claim_tasks(self) -> None:
        for name in self.wanted:
            if name not in self.tasks and self.membership.acquire_task(name):
                self._start_task(name)

    def commit(self) -> None:
        self._publish_skipped(self.tasks)
        written = commit_tasks(list(self.tasks.values()), self.broker)
        self.broker.flush()
        if written:
            self._rebuilds = 0
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
                task.failed = True  # nothing more is committed
            raise error
        log.warning(
            "%s: state store %r turned out damaged while running; dropping the %d task(s) "
            "of this worker without committing, to rebuild it from its changelog and go "
            "on from the last commit",
            self.member_id, error.store, len(self.tasks),
        )  # fmt: skip
        for name in list(self.tasks):
            task = self.tasks.pop(name)
            for topic in task.positions:
                self.pool.remove(topic, task.queue)
            self._skipped.pop(name, None)
            task.abandon()
        discard_damaged_store(error, self.engine.state_dir, self.member_id)

    def _end_of_input(self) -> None:
        """The supervisor declared bounded input over for a sub-topology (a control
        file): each of its tasks here finishes (closes windows...), commits, and says so."""
        eoi = self.membership.dir / "eoi"
        if not eoi.is_dir():
            return
        for name, task in list(self.tasks.items()):
            done = eoi / f"{name}.done"
            if not (eoi / str(task.sub.id)).exists():
                continue
            if not done.exists():
                task.end_of_input()
            elif not task.ended:
                task.input_ended()  # taken over after its end of input: say so again
            else:
                continue
            self._publish_skipped({name: task})
            task.commit()
            self.broker.flush()
            done.touch()

    def maintain(self) -> dict[str, int]:
        """Keep the log bounded: drop shuffle records every reader committed past (the
        job's own group is their only reader), compact the changelogs of owned tasks
        that hold many more records than keys, and apply topic retention."""
        done = {"purged_queues": 0, "compacted_records": 0, "retention_segments": 0}
        topics = self.topology.topics
        for task in self.tasks.values():
            for topic, pos in task.committed.items():
                if topics[topic].role == "shuffle":
                    self.broker.purge(topic, task.queue, pos)
                    done["purged_queues"] += 1
            for name, changelog in task.changelogs.items():
                q = task.queue
                records = self.broker.end_offset(changelog, q) - self.broker.start_offset(
                    changelog, q
                )
                if records > 2 * len(task.stores[name]) + self.config.compact_min_records:
                    done["compacted_records"] += self.broker.compact(changelog, q)
        done["retention_segments"] = self.broker.enforce_retention()
        return done

    # -- main loop -----------------------------------------------------------------------

    def run(self) -> None:
        """Join, work until :meth:`stop`, then commit and leave."""
        cfg = self.config
        self.membership.join()
        if cfg.agent_thread:
            self.pool.start()
        now = time.monotonic()
        next_heartbeat = next_rebalance = next_commit = now
        next_maintenance = now + cfg.maintenance_interval
        next_punctuate = now
        try:
            while not self.stop_event.is_set():
                try:
                    now = time.monotonic()
                    if now >= next_heartbeat:
                        if self.parent_pid is not None and os.getppid() != self.parent_pid:
                            log.warning("%s: the supervisor is gone; stopping", self.member_id)
                            break
                        self.membership.heartbeat()
                        next_heartbeat = now + cfg.heartbeat_interval
                        # Liveness check of the others: a dead member bumps the generation.
                        self.membership.members()
                    if self.membership.generation() != self._generation or now >= next_rebalance:
                        self.rebalance()
                        next_rebalance = now + cfg.rebalance_interval
                    self._claim_tasks()
                    if self.pool.error is not None:
                        raise self.pool.error
                    progress = 0
                    if not cfg.agent_thread:
                        self.pool.pull_all()  # the agents whose timer is due, or who were woken
                    for task in list(self.tasks.values()):
                        n = task.poll(cfg.batch_size)
                        if n:
                            progress += n
                            if task.wants_commit:
                                # A full state cache: commit to bound memory.
                                self._publish_skipped({task.id: task})
                                task.commit()
                            elif not self.exactly_once:
                                # Output is visible at once; downstream tasks of this worker
                                # need not wait for their timer. (Exactly-once output waits
                                # for its transaction.)
                                self.pool.wake(task.producer.flush())
                    if progress:
                        self.pool.wake(
                            relieve_memory(self.tasks.values(), self.engine.cache_entries)
                        )
                    self.processed += progress
                    if now >= next_punctuate:
                        wall = wall_clock_ms()
                        for task in self.tasks.values():
                            task.punctuate(wall)
                        self._end_of_input()
                        # Idle: look again soon (the end of a bounded run waits on this).
                        next_punctuate = now + (0.1 if progress else 0.02)
                    if time.monotonic() >= next_commit:
                        self.commit()
                        next_commit = time.monotonic() + cfg.commit_interval
                    if time.monotonic() >= next_maintenance:
                        log.debug("%s: maintenance %s", self.member_id, self.maintain())
                        next_maintenance = time.monotonic() + cfg.maintenance_interval
                    if not progress:
                        tasks = self.tasks.values()
                        if (
                            time.monotonic() >= next_commit - cfg.commit_interval * 0.9
                            and any(t.uncommitted for t in tasks)
                            and not any(t.lag() for t in tasks)
                        ):
                            # Input ran dry (not just a pull in flight): commit now, not at
                            # the timer, so output (which exactly-once shows only at commit)
                            # moves on at once; at most ten times per commit interval.
                            self.commit()
                            next_commit = time.monotonic() + cfg.commit_interval
                        self.stop_event.wait(cfg.idle_sleep)
                except StoreDamagedError as e:
                    # Damaged local state found while processing or committing.
                    self._rebuild(e)
        finally:
            self.pool.stop()
            failed = any(t.failed for t in self.tasks.values())
            for name in list(self.tasks):
                self._stop_task(name)
            if not failed:
                self.broker.flush()
            self.membership.leave()

    def stop(self, *_: Any) -> None:
        self.stop_event.set()


def restore_dir(group_dir: Path) -> Path:
    return group_dir / "restore"


def restore_progress(group_dir: Path) -> tuple[int, int] | None:
    """(offsets replayed, offsets to replay) over the tasks restoring now, or None."""
    done = total = 0
    for f in restore_dir(group_dir).glob("[!.]*"):
        try:
            d, t = (int(x) for x in f.read_text().split())
        except (OSError, ValueError):
            continue  # finished meanwhile, or being replaced
        done += d
        total += t
    return (done, total) if total else None


def _skipped_path(group_dir: Path, task: str) -> Path:
    return group_dir / "skipped" / task


def _read_skipped(path: Path) -> list[tuple[dict[str, int], int]]:
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    return [(dict(positions), int(count)) for positions, count in entries]


def skipped_at(group_dir: Path, task: str, committed: dict[str, int]) -> int:
    """How many records ``task`` skipped (over all its owners) in the input up to the
    ``committed`` positions. Workers write the count with the positions it covers before
    each commit (see :meth:`Worker._publish_skipped`), so the count that holds is the
    largest one whose positions are not beyond what was committed: a count written for a
    commit that never happened (the worker died) is not taken, and the records it
    counted are counted again by whoever processes them again."""
    best = 0
    for positions, count in _read_skipped(_skipped_path(group_dir, task)):
        if all(pos <= committed.get(topic, 0) for topic, pos in positions.items()):
            best = max(best, count)
    return best


def open_broker(root: str | os.PathLike[str], **kwargs: Any) -> Broker:
    from rstreams.runtime.queues.filelog import FileBroker

    return FileBroker(Path(root) / "log", **kwargs)


def main(argv: list[str] | None = None) -> int:
    """Run one worker. Exit codes: 0 stopped (SIGTERM/SIGINT, or the supervisor is
    gone), 3 a record failed processing, 4 another rstreams error (fatal: a restart
    would meet it again), 1 an unexpected exception (traceback; restarted)."""
    ap = argparse.ArgumentParser(prog="rstreams-worker", description="One embedded-runtime worker.")
    ap.add_argument("pipeline")
    ap.add_argument("--data-dir", required=True, help="the job's directory (log, offsets, groups)")
    ap.add_argument("--member", default=None)
    ap.add_argument("--on-error", default="fail", choices=("fail", "skip", "dead-letter"))
    ap.add_argument("--session-timeout", type=float, default=5.0)
    ap.add_argument("--commit-interval", type=float, default=1.0)
    ap.add_argument("--rebalance-interval", type=float, default=20.0)
    ap.add_argument("--maintenance-interval", type=float, default=30.0)
    ap.add_argument("--queue-mapper", default="modulo", choices=("modulo", "hash-ring"))
    ap.add_argument(
        "--allocation",
        default="averagely",
        choices=("averagely", "averagely_by_circle", "consistent_hash"),
    )
    ap.add_argument(
        "--guarantee", default="exactly-once", choices=("exactly-once", "at-least-once")
    )
    ap.add_argument("--state", default="rocksdb", choices=("rocksdb", "memory"))
    ap.add_argument(
        "--source-idle-ms",
        type=int,
        default=None,
        help="a task whose source queues gave nothing for this long stops holding back "
        "the watermark of the shuffles it writes (default: never)",
    )
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="stop when this process (the supervisor) is gone",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format=f"%(levelname)s worker[{os.getpid()}] %(name)s: %(message)s"
    )
    try:
        worker = _make_worker(args)
        gctune.tune()
        signal.signal(signal.SIGTERM, worker.stop)
        signal.signal(signal.SIGINT, worker.stop)
        worker.run()
    except ProcessingError as e:
        print(f"{WORKER_ERROR_PREFIX}{e}", file=sys.stderr)
        return EXIT_PROCESSING_ERROR
    except RStreamsError as e:
        # The last thing the worker prints: the supervisor reports it as the run's error.
        print(f"{WORKER_ERROR_PREFIX}{type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FATAL
    return 0


#: How a worker's last line, its error, starts (the supervisor looks for it in the log).
WORKER_ERROR_PREFIX = "rstreams worker: "


def _make_worker(args: argparse.Namespace) -> Worker:
    from rstreams.loader import load_topology

    topology = load_topology(args.pipeline)
    worker = Worker(
        topology,
        open_broker(args.data_dir),
        args.data_dir,
        member_id=args.member,
        strategy=get_strategy(args.allocation),
        engine=EngineConfig(
            on_error=args.on_error,
            coalesce=True,
            combine=True,
            queue_mapper=get_mapper(args.queue_mapper),
            guarantee=args.guarantee,
            state=args.state,
            state_dir=str(Path(args.data_dir) / "state"),
            source_idle_ms=args.source_idle_ms,
        ),
        config=WorkerConfig(
            session_timeout=args.session_timeout,
            commit_interval=args.commit_interval,
            rebalance_interval=args.rebalance_interval,
            maintenance_interval=args.maintenance_interval,
        ),
    )
    worker.parent_pid = args.parent_pid
    return worker


if __name__ == "__main__":
    sys.exit(main())
