"""``rstreams run`` on the durable embedded runtime: the supervisor, which coordinates.

The supervisor (the ``rstreams run`` process itself):

1. opens the job's directory ``<data-dir>/<job-id>/`` (see the layout module: file log,
   offsets, group files) under the job lock, and creates the topology's topics; with
   ``--broker`` the log, offsets, group and lock are the broker's (see the brokers
   module), and ``--join`` runs only workers (see the joined module);
2. starts N worker processes (one consumer group: the job id), restarts those that die
   unexpectedly and ends the run on an error a restart would meet again (see the
   workerpool module);
3. appends the input files to their source topics in chunks of whole lines,
   remembering what each file gave (in the last record of every chunk, so a crash
   between the append and any bookkeeping can not ingest a chunk twice; see the ingest
   module). Running again with the same data directory resumes: only what was not
   ingested yet is read (a file that grew is tailed); a file that no longer holds what
   was read of it (rewritten, cut shorter, a last line read without its newline that
   goes on now) is refused before any work, and so is one truncated or replaced while
   a ``follow`` run reads it;
4. when everything is ingested and every input queue of every sub-topology is committed
   up to its end, declares end of input to each sub-topology in turn (see the
   endofinput module), stops the workers (they commit and leave) and reads the final
   table of each sink topic (last value per key) and the count of skipped records (see
   the collect module).

SIGINT and SIGTERM stop a run, whatever dispositions the process inherited (a shell
starts a background job with SIGINT ignored): the supervisor tells its workers to
commit and leave, then a bounded run raises KeyboardInterrupt and a ``follow`` run
returns what it committed. Workers run in their own session, so a signal meant for the
run (Ctrl-C reaches the terminal's whole process group) reaches them only through the
supervisor; a worker that stops without being asked is restarted, and the warning says
why it stopped.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from rstreams import interrupts
from rstreams.config import RunConfig, dead_letter_topic, default_workers
from rstreams.errors import ConfigError, FencedError
from rstreams.planner.describe import tree_data
from rstreams.planner.diff import TopologyDiff
from rstreams.planner.topology import DEFAULT_SHUFFLE_QUEUES, Topology
from rstreams.runtime.engine.coordination.collect import Collector, publish_stats
from rstreams.runtime.engine.coordination.local import create_topics
from rstreams.runtime.engine.coordination.outage import Outage
from rstreams.runtime.engine.coordination.stats import SupervisorStats
from rstreams.runtime.engine.coordination.workerpool import WorkerPool
from rstreams.runtime.engine.io.external import Externals, check_external_broker
from rstreams.runtime.engine.io.ingest import (
    AHEAD_CHUNKS,
    Ingest,
    Input,
    held_before,
    read_marks,
    resumed_text,
)
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.tasks.endofinput import EndOfInput
from rstreams.runtime.engine.tasks.lifecycle import (
    SUPERVISOR_TRANSITIONS,
    StateMachine,
    SupervisorState,
)
from rstreams.runtime.layout import JobLayout
from rstreams.runtime.positions import position_bases
from rstreams.runtime.queues.brokers import (
    broker_identity,
    broker_target,
    check_broker_permissions,
    claim_local_state,
    drop_job,
    on_redis,
    open_broker,
    open_eoi_flags,
    open_job_lock,
    redis_client,
)
from rstreams.runtime.queues.fsck import refuse_if_repaired
from rstreams.runtime.topology_guard import (
    check_topology,
    publish_topology,
    stale_at_end,
    stale_at_start,
)

log = logging.getLogger("rstreams.supervisor")

#: Signals that stop a run as Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Seconds between two end-of-input checks while records wait for a commit (workers
#: commit every second): checked every turn (50 a second), they took half the
#: supervisor's CPU time of a run. Declaring, once all is committed, goes every turn.
EOI_RECHECK = 0.1


def _check_input_files(inputs: dict[str, str]) -> None:
    for path in inputs.values():
        if path == "-":
            raise ConfigError("standard input can only be read with --in-memory")
        if not os.path.isfile(path):
            raise ConfigError(f"input file {path!r} does not exist or is not a file")


class Supervisor:
    """Runs a pipeline file on N worker processes until bounded input is processed."""

    #: Publishes ``supervisor.json`` while :meth:`run` goes on (see the stats module).
    stats: SupervisorStats | None = None
    #: The signal that asked the run to stop (its name), once one did.
    stop_signal: str | None = None
    #: When to check for the end of input next (see _copied_all), and (when, records)
    #: the last check found waiting for a commit.
    _look_at = 0.0
    _waiting: tuple[float, int] = (-EOI_RECHECK, 0)

    def __init__(
        self,
        pipeline_path: str,
        topology: Topology,
        inputs: dict[str, str],
        config: RunConfig | None = None,
        *,
        progress: Callable[[dict[str, Any]], None] | None = None,
        max_ingest_rate: float | None = None,
        **options: Any,
    ) -> None:
        """``config`` (or its options as keywords: ``workers=2, data_dir=...``) says how
        to run; ``max_ingest_rate`` (lines per second) slows ingest down, for tests."""
        config = RunConfig.of(config, **options)
        #: STARTING until :meth:`run`, then RUNNING, then DONE or FAILED (what
        #: ``supervisor.json`` says; see SupervisorState).
        self.lifecycle = StateMachine(
            "supervisor", SUPERVISOR_TRANSITIONS, SupervisorState.STARTING
        )
        data_dir = config.durable_data_dir
        _check_input_files(inputs)
        # (a RedisStream is on the run's Redis: refused before anything is opened)
        self.external_url = check_external_broker(topology, config.broker)
        self.externals: Externals | None = None
        self.config = config
        self.pipeline_path = pipeline_path
        self.topology = topology
        self.progress = progress
        self.follow = config.follow
        self.n_workers = config.workers or default_workers()
        self.layout = JobLayout.of(data_dir, topology.job_id)
        self.root = self.layout.root
        self.group_dir = self.layout.coordination.dir
        self.skipped_before = 0
        # One run per job at a time, from before --fresh deletes anything until close().
        check_broker_permissions(config, topology.job_id)
        self.lock = open_job_lock(data_dir, topology.job_id, config).acquire()
        try:
            self._open(inputs, max_ingest_rate)
        except BaseException:  # (a failed start must not keep the job locked)
            if hasattr(self, "broker"):
                self.broker.close()
            if self.externals is not None:
                self.externals.close()
            self.lock.release()
            raise

    def _open(self, inputs: dict[str, str], max_ingest_rate: float | None) -> None:
        """Open the job's directory and log, refuse what would corrupt the job, create
        the topics and the run's parts."""
        config, topology, job = self.config, self.topology, self.topology.job_id
        if config.fresh and self.root.exists():
            shutil.rmtree(self.root)
        if config.fresh and on_redis(config):
            drop_job(config, job)  # (its streams, offsets and group; not the lock)
        refuse_if_repaired(self.root)  # a repair removed records this job consumed
        self.root.mkdir(parents=True, exist_ok=True)
        claim_local_state(self.layout, config)
        self.broker = open_broker(self.root, config)
        # On Redis, every write of this run checks that no other run took the job lock
        # since (a pause past the lease): see redis_joblock.
        owner_fence = getattr(self.lock, "fence", None)
        if owner_fence is not None:
            self.broker.owner_fence = owner_fence  # type: ignore[attr-defined]
        # Refuse an input that no longer holds what the job read of it, before any work
        # (recording the topology is some).
        read = read_marks(self.broker, inputs)
        # Refuse a topology that would orphan or misread this job's state; record it.
        self.topology_change = check_topology(
            self.root, topology, allow=config.allow_topology_change, fresh=config.fresh
        )
        if on_redis(config):  # (for the hosts that join this run: the same code or none)
            publish_topology(redis_client(config), topology)
        #: Input records the job had taken in before this run (0: a new job); said once
        #: the run is known to go ahead (not before a refusal).
        self.resumed = 0 if config.fresh else self._resumed(inputs)
        self.layout.logs.mkdir(exist_ok=True)
        # Source topics the job creates get several queues, so that work can spread over
        # workers (now or in a later run with more of them).
        self.engine = EngineConfig.of(config, default_queues=DEFAULT_SHUFFLE_QUEUES)
        self.queue_counts = create_topics(topology, self.broker, self.engine)
        self.on_error = config.on_error
        self.pool = WorkerPool(
            config.replace(pipeline=self.pipeline_path), self.layout,
            committed=lambda: self.broker.group_offsets(job),
        )  # fmt: skip
        group = self.layout.coordination
        self.end_of_input = EndOfInput(
            self.broker, topology, self.queue_counts, group, open_eoi_flags(group, job, config)
        )
        self.collector = Collector(self.broker, topology, self.queue_counts, group)
        bases = position_bases(topology)
        self.inputs = [
            Input(
                topic,
                path,
                self.queue_counts[topic],
                read[topic],
                bases.get(topic),
                max_line=config.max_line_bytes,
            )
            for topic, path in inputs.items()
        ]
        self.ingest = Ingest(
            self.broker, job, self.inputs, chunk_lines=config.chunk_lines,
            follow=config.follow, max_rate=max_ingest_rate,
            max_ahead=AHEAD_CHUNKS * config.chunk_lines if on_redis(config) else None,
        )  # fmt: skip
        if self.external_url is not None:
            from rstreams.runtime.queues.redisstreams import connect

            self.externals = Externals(
                connect(broker_target(config)), self.broker, topology, self.queue_counts,
                chunk=config.chunk_lines, follow=config.follow, fence=owner_fence,
            )  # fmt: skip
        if self.stale is not None:
            paths = [i.path for i in self.inputs]
            unread = [i.path for i in self.inputs if i.position < i.size]
            log.warning("%s", stale_at_start(job, self.stale, paths, unread))

    def _resumed(self, inputs: dict[str, str]) -> int:
        """Say (one line) that the run resumes a job with earlier state, and what it
        holds; the input records it had taken in."""
        held, files = held_before(self.broker, list(self.topology.source_topics))
        given = {os.path.realpath(p): p for p in inputs.values()}  # (as the user named them)
        files = [given.get(f, f) for f in files]
        if held:
            where = broker_identity(self.config) if on_redis(self.config) else str(self.root)
            job = self.topology.job_id
            log.warning("%s", resumed_text(job, where, held, files, list(inputs.values())))
        return held

    @property
    def stale(self) -> TopologyDiff | None:
        """The change since the job's last run when it left state or output stale (what
        the earlier version computed, kept: the change applies to new input only)."""
        d = self.topology_change
        return d if d is not None and d.stale else None

    @property
    def state(self) -> SupervisorState:
        """Where the run is: a ``SupervisorState`` (tasks/lifecycle.py)."""
        return self.lifecycle.state

    # -- workers (see WorkerPool) --------------------------------------------------------

    @property
    def procs(self) -> dict[int, Any]:
        """Per slot, its worker process (a ``subprocess.Popen``)."""
        return self.pool.procs

    @property
    def spawned(self) -> int:
        """Workers started in this run, replacements included."""
        return self.pool.spawned

    @property
    def restarts(self) -> int:
        """Replacement workers started in this run."""
        return self.pool.restarts

    @property
    def failures(self) -> list[str]:
        """How the workers restarted in a row without progress ended."""
        return self.pool.failures

    def add_worker(self) -> int:
        """Start one more worker (it joins the group: a rebalance); returns its slot."""
        return self.pool.add_worker()

    def remove_worker(self, slot: int) -> None:
        """Ask a worker to commit and leave the group (SIGTERM); it is not replaced."""
        self.pool.remove_worker(slot)

    def kill_worker(self, slot: int, sig: int = signal.SIGKILL) -> None:
        """For fault-injection tests: signal one worker."""
        self.pool.kill_worker(slot, sig)

    # -- run -----------------------------------------------------------------------------

    def lag(self) -> int:
        """Records not yet committed, over every input queue of every sub-topology."""
        return self.end_of_input.lag()

    def _recent_lag(self) -> int:
        """:meth:`lag`, or what the end-of-input check found under EOI_RECHECK ago (the
        progress line asks ten times a second)."""
        at, lag = self._waiting
        return lag if time.monotonic() - at < EOI_RECHECK else self.lag()

    def run(self) -> dict[str, Any]:
        """Run until bounded input is processed and committed (or, following input, until
        SIGINT or SIGTERM); returns the run's counts. A bounded run stopped by SIGINT or
        SIGTERM raises KeyboardInterrupt once its workers committed and left."""
        self.stop_signal = None
        if threading.current_thread() is not threading.main_thread():
            return self._run()  # signals can only be handled on the main thread
        # Set whatever was inherited (SIG_IGN in a background job of a script). The handler
        # only takes note: the loop stops between steps, never in the middle of an append.
        previous = {sig: signal.signal(sig, self._on_stop_signal) for sig in STOP_SIGNALS}
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        interrupts.note(signum)  # (the command's exit code: 130 for SIGINT, 143 SIGTERM)
        self.stop_signal = signal.Signals(signum).name

    def _start(self) -> SupervisorStats:
        self.end_of_input.reset()
        # Restore progress left by workers of an earlier run that died mid-restore.
        shutil.rmtree(self.layout.coordination.restore, ignore_errors=True)
        self.skipped_before = self.skipped()
        #: Records the sink topics held before this run (a resumed job's).
        self.out_before = self.collector.records_out()
        stats = self.stats = self.pool.stats = SupervisorStats(
            self.group_dir, job=self.topology.job_id, pipeline=self.pipeline_path,
            workers_wanted=self.n_workers, tree=tree_data(self.topology),
        )  # fmt: skip
        stats.clear()
        self.pool.start(self.n_workers)
        return stats

    def _run(self) -> dict[str, Any]:
        start = time.monotonic()
        self._start()
        self.lifecycle.to(SupervisorState.RUNNING)
        self._next_report = 0.0
        self._look_at = 0.0
        self._waiting = (-EOI_RECHECK, 0)
        outage, resync = Outage(), False
        ended = False  # (FAILED unless the loop ends as it should)
        #: A bounded run's counts when everything was committed: what the run did, not
        #: what the stopping workers' last commits look like a moment later.
        final: dict[str, Any] | None = None
        try:
            while final is None:
                if self.stop_signal is not None:
                    raise KeyboardInterrupt
                try:
                    if resync:  # the broker is back: is its data, and where did we stop?
                        self._resync()
                    final = self._step(start)
                except FencedError as e:  # (only this run's job lock fences its writes)
                    raise self.lock.lost_error() from e
                except Exception as e:
                    if not outage.ride_out(e):
                        raise
                    resync = True
                    continue
                resync = False
                outage.over()
            if getattr(self.lock, "lost", False):
                raise self.lock.lost_error()
            ended = True
        except KeyboardInterrupt:
            if not self.follow:
                raise
            ended = True  # following input, this is how a run ends
            log.info(
                "%s: stopping the workers, which commit what they processed",
                self.stop_signal or "interrupted",
            )
        finally:
            self.lifecycle.to(SupervisorState.DONE if ended else SupervisorState.FAILED)
            self.pool.stop()
            if self.externals is not None and ended:
                self.externals.drain()  # (what the workers committed as they left)
            self._publish_stats(start, final)
        return self.status(start) if final is None else final

    def _step(self, start: float) -> dict[str, Any] | None:
        """One turn of the loop; the run's counts once a bounded run is over."""
        if getattr(self.lock, "lost", False):
            raise self.lock.lost_error()  # (another run owns the job now: stop at once)
        self.ingest.look_again()  # (following input: Ctrl-C ends the run)
        self.pool.check()
        ingested = self.ingest.step()
        if self.externals is not None:
            ingested = self.externals.step() or ingested
        if self.progress is not None and time.monotonic() >= self._next_report:
            self.progress(self.status(start))
            self._next_report = time.monotonic() + 0.1
        assert self.stats is not None
        if self.stats.due():
            self._publish_stats(start)
        if self.ingest.done and not self.follow and self._copied_all():
            return self.status(start)
        if not ingested:
            self._idle()
        return None

    def _resync(self) -> None:
        """After the connection to the broker broke: check that it came back with every
        queue at least where this run saw it end (else RedisDataLostError), and go on
        ingesting from what the broker holds."""
        check = getattr(self.broker, "check_reached", None)
        if check is not None:
            check()
        self.ingest.resync()
        if self.externals is not None:
            self.externals.ingest.resync()

    def _copied_all(self) -> bool:
        """Everything ingested, committed, and copied to external sinks."""
        ext = self.externals
        if ext is not None and not ext.ingest.done:
            return False
        now = time.monotonic()
        if now < self._look_at:
            return False
        # (end_of_input.over(), looking again in a while when records wait for a commit)
        waiting = self.end_of_input.waiting()
        self._waiting = (now, waiting)
        if waiting:
            self._look_at = now + EOI_RECHECK
            return False
        if not self.end_of_input.declare_step():
            return False
        if ext is not None:
            ext.drain()
        return True

    def _idle(self) -> None:
        """Nothing to ingest now: wait a little (for an external stream's next entry)."""
        if self.externals is not None and self.follow:
            self.externals.ingest.wait(20)
        else:
            time.sleep(0.02)

    def _publish_stats(self, start: float, final: dict[str, Any] | None = None) -> None:
        assert self.stats is not None
        status = (lambda: self.status(start)) if final is None else (lambda: final)
        publish_stats(self.stats, status, self.pool.pids(), self.state)

    def skipped(self) -> int:
        """Records the job skipped (``--on-error skip`` or ``dead-letter``) in the work it
        committed, over all its runs."""
        return self.collector.skipped()

    def status(self, start: float) -> dict[str, Any]:
        """The run's counts so far (``start``: when it started, on the monotonic clock)."""
        counts = self.ingest.counts()
        if self.externals is not None:
            counts["records_in"] += self.externals.ingest.copied()
        return {
            **counts,
            "records_out": self.collector.records_out(),
            "lag": self._recent_lag(),
            "elapsed": time.monotonic() - start,
            "workers": self.pool.alive(),
            "restoring": self.collector.restoring(),
        }

    def tables(self) -> dict[str, dict[Any, Any]]:
        """Final table (last value per key) of every sink topic, read from the log."""
        return self.collector.tables()

    def close(self) -> None:
        try:
            self.broker.close()
            if self.externals is not None:
                self.externals.close()
        finally:
            self.lock.release()


def run_durable(
    pipeline_path: str,
    topology: Topology,
    inputs: dict[str, str],
    config: RunConfig,
    *,
    progress: Callable[[Any], None] | None = None,
) -> Any:
    """Run on worker processes over the file log (or ``config.broker``); returns a
    :class:`~rstreams.runtime.results.RunResult`. With ``config.join``, only this host's
    workers of a job another run owns (see the joined module)."""
    from rstreams.runtime.results import Progress, RunResult

    if config.join:
        return _run_joined(pipeline_path, topology, config)

    def report(s: dict[str, Any]) -> None:
        if progress is not None:
            progress(
                Progress(
                    s["records_in"],
                    s["records_out"],
                    s["bytes_read"],
                    s["bytes_total"],
                    s["elapsed"],
                    lag=s["lag"],
                    restoring=s["restoring"],
                    workers=s["workers"],
                )
            )

    sup = Supervisor(pipeline_path, topology, inputs, config, progress=report)
    try:
        status = sup.run()
        tables = sup.tables()
        metrics: dict[str, int] = {}
        skipped = sup.skipped() - sup.skipped_before
        if skipped:
            metrics["skipped"] = skipped
            _warn_skipped(skipped, config, sup.layout)
        stale: tuple[str, ...] = ()
        if sup.stale is not None:
            stale = tuple(str(c.new) for c in sup.stale.stale_changes)
            paths = [i.path for i in sup.inputs]
            log.warning("%s", stale_at_end(sup.stale, status["records_in"], paths))
        if sup.restarts and config.guarantee == "at-least-once":
            # What a worker processed after its last commit is processed again by the
            # worker that takes its queues over: said here, or an over-count looks exact.
            log.warning(
                "%d worker restart(s) during this --guarantee at-least-once run: the results "
                "may include duplicates (records processed again after a restart are counted "
                "again); use --guarantee exactly-once for exact results",
                sup.restarts,
            )
    finally:
        sup.close()
    out = status["records_out"] - sup.out_before
    return RunResult(
        tables, status["records_in"], out, status["elapsed"], metrics, stale,
        resumed=sup.resumed,
    )  # fmt: skip


def _run_joined(pipeline_path: str, topology: Topology, config: RunConfig) -> Any:
    from rstreams.runtime.engine.coordination.joined import JoinedRun
    from rstreams.runtime.results import RunResult

    joined = JoinedRun(pipeline_path, topology, config)
    try:
        status = joined.run()
        tables = joined.collector.tables()
    finally:
        joined.close()
    return RunResult(tables, 0, status["records_out"], status["elapsed"], {})


def _warn_skipped(skipped: int, config: RunConfig, layout: JobLayout) -> None:
    """Say where the records that failed in this run went."""
    if config.on_error == "dead-letter":
        topic = dead_letter_topic(layout.job)
        log.warning(
            "%d record(s) failed and were dead-lettered to the topic %r of the job's log; "
            "read them with `rstreams consume %s --from-beginning --data-dir %s`",
            skipped,
            topic,
            topic,
            shlex.quote(str(layout.data_dir)),
        )
    else:
        log.warning(
            "%d record(s) failed and were skipped; the worker logs name each: %s",
            skipped,
            layout.logs,
        )
