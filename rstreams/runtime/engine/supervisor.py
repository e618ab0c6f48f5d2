"""``rstreams run`` on the durable embedded runtime: ingest, supervise workers, collect.

The supervisor (the ``rstreams run`` process itself):

1. opens the job's directory ``<data-dir>/<job-id>/`` (file log, offsets, group files)
   and creates the topology's topics;
2. starts N worker processes (one consumer group: the job id);
3. appends the input files to their source topics in chunks of whole lines,
   remembering what each file gave (in the last record of every chunk, so a crash
   between the append and any bookkeeping can not ingest a chunk twice; see the ingest
   module). Running again with the same data directory resumes: only what was not
   ingested yet is read (a file that grew is tailed); a file that no longer holds what
   was read of it (rewritten, cut shorter, a last line read without its newline that
   goes on now) is refused before any work, and so is one truncated or replaced while
   a ``follow`` run reads it;
4. restarts a worker that dies unexpectedly (killed by a signal, or an unexpected
   exception: exit code 1) after a backoff (0.1 s doubling up to 5 s; it rejoins the
   group, the others take its tasks over meanwhile), and gives up after
   ``max_restarts`` restarts in a row during which the job committed nothing. A worker
   that stops on an error a restart would meet again (a record that failed: exit code
   3; another rstreams error such as a corrupt log: exit code 4) ends the run at once
   with that error;
5. when everything is ingested and every input queue of every sub-topology is committed
   up to its end (checked upstream first), stops the workers (they commit and leave)
   and reads the final table of each sink topic (last value per key).

SIGINT and SIGTERM stop a run, whatever dispositions the process inherited (a shell
starts a background job with SIGINT ignored): the supervisor tells its workers to
commit and leave, then a bounded run raises KeyboardInterrupt and a ``follow`` run
returns what it committed. Workers run in their own session, so a signal meant for the
run (Ctrl-C reaches the terminal's whole process group) reaches them only through the
supervisor; a worker that stops without being asked is restarted, and the warning says
why it stopped.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from rstreams.config import DEFAULT_DATA_DIR, RunConfig, dead_letter_topic, default_workers
from rstreams.errors import ConfigError, ProcessingError, RStreamsError
from rstreams.planner.diff import TopologyDiff
from rstreams.planner.topology import DEFAULT_SHUFFLE_QUEUES, Topology
from rstreams.runtime.engine.context import EngineConfig
from rstreams.runtime.engine.ingest import (
    INGEST_HEADER,
    ReadMark,
    Tap,
    input_changed,
    last_mark,
    what_changed,
)
from rstreams.runtime.engine.joblock import JobLock
from rstreams.runtime.engine.launch import WorkerLaunch, log_level_of
from rstreams.runtime.engine.local import create_topics, wall_clock_ms
from rstreams.runtime.engine.stats import SupervisorStats
from rstreams.runtime.engine.taskid import TaskId
from rstreams.runtime.engine.topology_guard import check_topology, stale_at_end, stale_at_start
from rstreams.runtime.engine.watermarks import ingest_group
from rstreams.runtime.engine.worker import (
    EXIT_FATAL,
    EXIT_PROCESSING_ERROR,
    STOPPED_ON,
    WORKER_ERROR_PREFIX,
    open_broker,
    restore_progress,
    skipped_at,
)
from rstreams.runtime.queues.fsck import refuse_if_repaired

log = logging.getLogger("rstreams.supervisor")


#: Restarts wait this long, doubling after each restart without progress, up to the cap.
RESTART_BACKOFF = 0.1
RESTART_BACKOFF_MAX = 5.0
#: Restarts in a row without progress (no commit) before a run gives up.


def describe_exit(code: int) -> str:
    """``killed by SIGKILL`` or ``exit code 1``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _worker_error(code: int, text: str) -> RStreamsError:
    """The error a worker stopped on (it printed it last, after WORKER_ERROR_PREFIX), as
    the same kind of rstreams error where it names one (a ConfigError stays one)."""
    import rstreams.errors as errors

    at = text.rfind(WORKER_ERROR_PREFIX)
    msg = text[at + len(WORKER_ERROR_PREFIX) :].strip() if at >= 0 else ""
    if code == EXIT_PROCESSING_ERROR:
        return ProcessingError(msg or "a worker failed on a record")
    name, sep, rest = msg.partition(": ")
    if not (sep and name.isidentifier()):
        return RStreamsError(msg or f"a worker stopped with {describe_exit(code)}")
    cls = getattr(errors, name, None)
    if (
        isinstance(cls, type)
        and issubclass(cls, RStreamsError)
        and not issubclass(cls, ProcessingError)
    ):
        try:
            return cls(rest)
        except TypeError:  # an error class that takes more than a message
            pass
    return RStreamsError(rest)  # e.g. a CorruptLogError: its message says what it is


#: Lines of each worker's output the supervisor keeps (for the errors it reports).
TAIL_LINES = 200


def _tee(output: IO[bytes], path: Path, tail: collections.deque[str]) -> None:
    """Copy a worker's output to its log file, keeping its last lines in ``tail``. A
    write that fails (a full disk) loses the line in the file only."""
    log_file: IO[bytes] | None = None
    with contextlib.suppress(OSError):
        log_file = open(path, "ab")  # noqa: SIM115
    try:
        for line in output:
            tail.append(line.decode(errors="replace").rstrip("\n"))
            if log_file is not None:
                try:
                    log_file.write(line)
                    log_file.flush()
                except OSError:
                    pass  # (the next line may fit again)
    finally:
        output.close()
        if log_file is not None:
            with contextlib.suppress(OSError):
                log_file.close()


#: Signals that stop a run as Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Input:
    """One input file being appended to its source topic."""

    def __init__(self, topic: str, path: str, queues: int, read: ReadMark | None) -> None:
        self.topic = topic
        self.path = path
        self.id = os.path.realpath(path)
        self.queues = queues
        st = os.stat(path)
        #: What the job has read of the file (in the log: the last chunk's header).
        self.mark = read or ReadMark(self.id, 0, st.st_dev, st.st_ino)
        self.position = self.mark.position
        self.lines = 0
        #: Each queue's end when the ingest last reached the end of the file, recorded.
        self.ended_at: dict[int, int] = {}
        self.size = st.st_size

    def current_size(self) -> int:
        """The file's size now (a followed file grows), never below what was read."""
        with contextlib.suppress(OSError):  # (moved away: what it had is what it has)
            self.size = os.path.getsize(self.path)
        return max(self.size, self.position)

    def check(self, follow: bool = False) -> None:
        """Refuse a file that no longer holds what the job read of it (ConfigError)."""
        what = what_changed(self.path, self.mark, follow=follow)
        if what is not None:
            raise input_changed(self.path, what)

    def chunks(
        self, chunk_lines: int, follow: bool = False
    ) -> Iterator[tuple[list[bytes], ReadMark]]:
        """Chunks of whole lines from the current position, each with the mark of what was
        read up to its end. A last line without a newline is taken as a line at the end of
        a bounded file (its mark says so: a later run refuses the file if the line goes
        on), but left for later when following a file that is still being written."""
        from rstreams.runtime.inputs import line_chunks

        start = self.position  # the caller moves position on as chunks are appended
        with open(self.path, "rb") as f:
            if not self.mark.newline and os.pread(f.fileno(), 1, start) == b"\n":
                # A line read without its newline got just that newline since (anything
                # else fails the check): the line was whole; read on after it.
                start += 1
            tap = Tap(f, self.id, start, self.mark)
            for lines, consumed in line_chunks(tap, chunk_lines, last_partial=not follow):
                yield lines, tap.mark(start + consumed)


class Supervisor:
    """Runs a pipeline file on N worker processes until bounded input is processed."""

    #: Publishes ``supervisor.json`` while :meth:`run` goes on (see the stats module).
    stats: SupervisorStats | None = None

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
        data_dir = config.data_dir or DEFAULT_DATA_DIR
        workers = config.workers or default_workers()
        on_error, guarantee, state = config.on_error, config.guarantee, config.state
        for path in inputs.values():
            if path == "-":
                raise ConfigError("standard input can only be read with --in-memory")
            if not os.path.isfile(path):
                raise ConfigError(f"input file {path!r} does not exist or is not a file")
        self.config = config
        self.pipeline_path = pipeline_path
        self.topology = topology
        self.root = Path(data_dir) / topology.job_id
        # One run per job at a time, from before --fresh deletes anything until close().
        self.lock = JobLock(data_dir, topology.job_id).acquire()
        try:
            if config.fresh and self.root.exists():
                shutil.rmtree(self.root)
            refuse_if_repaired(self.root)  # a repair removed records this job consumed
            self.root.mkdir(parents=True, exist_ok=True)
            self.broker = open_broker(self.root)
            # Refuse an input that no longer holds what the job read of it, before any
            # work (recording the topology is some): resuming would count lines twice,
            # skip them, or count a fragment of a line as a line.
            read: dict[str, ReadMark | None] = {}
            for topic, path in inputs.items():
                mark = read[topic] = last_mark(self.broker, topic, os.path.realpath(path))
                if mark is not None and (what := what_changed(path, mark)) is not None:
                    raise input_changed(path, what)
            # Refuse a topology that would orphan or misread this job's state; record it.
            self.topology_change = check_topology(
                self.root, topology, allow=config.allow_topology_change, fresh=config.fresh
            )
            (self.root / "logs").mkdir(exist_ok=True)
            # Source topics the job creates get several queues, so that work can spread over
            # workers (now or in a later run with more of them).
            self.engine = EngineConfig(
                on_error=on_error,
                default_queues=DEFAULT_SHUFFLE_QUEUES,
                guarantee=guarantee,
                state=state,
            )
            self.queue_counts = create_topics(topology, self.broker, self.engine)
            self.on_error = on_error
            self.n_workers = workers
            self.chunk_lines = config.chunk_lines
            self.max_restarts = config.max_restarts
            self.progress = progress
            self.follow = config.follow
            self.max_ingest_rate = max_ingest_rate  # lines per second, None = as fast as it goes
            self.procs: dict[int, subprocess.Popen[bytes]] = {}
            #: Restarts in a row without progress, and how each of those workers ended.
            self.failures: list[str] = []
            #: Replacement workers started in the whole run (``failures`` is reset by progress).
            self.restarts = 0
            self.backoff = RESTART_BACKOFF
            #: Slots whose replacement worker starts at this (monotonic) time.
            self._respawn: dict[int, float] = {}
            #: The group's committed offsets when a worker was last (re)started.
            self._committed_at_restart: dict[tuple[str, int], int] = {}
            self.group_dir = self.root / "coordination" / topology.job_id
            self.skipped_before = 0
            self._retiring: list[subprocess.Popen[bytes]] = []
            #: Per slot: the last lines its workers wrote, and the thread copying them.
            self._tails: dict[int, collections.deque[str]] = {}
            self._tees: dict[int, threading.Thread] = {}
            self.spawned = 0
            self.inputs = []
            for topic, path in inputs.items():
                self.inputs.append(_Input(topic, path, self.queue_counts[topic], read[topic]))
            if self.stale is not None:
                paths = [i.path for i in self.inputs]
                unread = [i.path for i in self.inputs if i.position < i.size]
                log.warning("%s", stale_at_start(topology.job_id, self.stale, paths, unread))
        except BaseException:  # (a failed start must not keep the job locked)
            if hasattr(self, "broker"):
                self.broker.close()
            self.lock.release()
            raise

    @property
    def stale(self) -> TopologyDiff | None:
        """The change since the job's last run when it left state or output stale (what
        the earlier version computed, kept: the change applies to new input only)."""
        d = self.topology_change
        return d if d is not None and d.stale else None

    # -- workers -------------------------------------------------------------------------

    def _spawn(self, slot: int) -> None:
        self.spawned += 1
        member = f"w{slot}-{self.spawned}"
        # Its configuration comes on its stdin, typed (never as arguments anyone can read).
        launch = WorkerLaunch(
            config=self.config.replace(pipeline=self.pipeline_path),
            job_dir=str(self.root),
            member=member,
            parent_pid=os.getpid(),
            log_level=log_level_of(log),
        )
        cmd = [sys.executable, "-m", "rstreams.runtime.engine.worker", "-"]
        # A session of its own: a signal sent to the run's process group (Ctrl-C) is the
        # supervisor's to handle; a worker that got it too would stop, exit 0 and be
        # restarted while the supervisor stops the others. A supervisor that dies without
        # stopping them is noticed through its parent_pid.
        # Its output comes through a pipe, copied to its log file: on a full disk the log
        # loses lines, the supervisor does not (it reports the worker's last words).
        p = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        launch.send(p)
        self.procs[slot] = p
        tail = self._tails.setdefault(slot, collections.deque(maxlen=TAIL_LINES))
        assert p.stdout is not None
        self._tees[slot] = threading.Thread(
            target=_tee, args=(p.stdout, self.root / "logs" / f"worker-{slot}.log", tail),
            name=f"worker-{slot}-output", daemon=True,
        )  # fmt: skip
        self._tees[slot].start()
        if self.stats is not None:
            self.stats.spawned(slot)

    def _progressed(self) -> bool:
        """Did the job commit anything since a worker was last (re)started?"""
        now = self.broker.group_offsets(self.topology.job_id)
        before = self._committed_at_restart
        return any(off > before.get(tq, 0) for tq, off in now.items())

    def _check_workers(self) -> None:
        now = time.monotonic()
        for slot, due in list(self._respawn.items()):
            if now >= due:
                del self._respawn[slot]
                self._committed_at_restart = self.broker.group_offsets(self.topology.job_id)
                self._spawn(slot)
        for slot, p in list(self.procs.items()):
            code = p.poll()
            if code is None or slot in self._respawn:
                continue
            if code in (EXIT_PROCESSING_ERROR, EXIT_FATAL, 2):
                # A restart would meet the same error (2: the worker refused its options).
                raise _worker_error(code, self._log_tail(slot, 200))
            if self._progressed():
                self.failures = []
                self.backoff = RESTART_BACKOFF
            self.failures.append(self._why_exited(slot, code))
            if len(self.failures) > self.max_restarts:
                raise RStreamsError(
                    f"worker {slot} {describe_exit(code)}; giving up after "
                    f"{len(self.failures) - 1} restart(s) in a row without progress (the job "
                    f"committed nothing meanwhile; --max-restarts {self.max_restarts}). The "
                    f"workers ended: {', '.join(self.failures)}. Last log lines of worker {slot} "
                    f"({self.root / 'logs' / f'worker-{slot}.log'}):\n{self._log_tail(slot)}"
                )
            log.warning(
                "worker %d %s; starting a replacement in %.1fs", slot, self.failures[-1],
                self.backoff,
            )  # fmt: skip
            self._respawn[slot] = now + self.backoff
            self.restarts += 1
            self.backoff = min(self.backoff * 2, RESTART_BACKOFF_MAX)

    def _why_exited(self, slot: int, code: int) -> str:
        """How a worker the supervisor did not stop ended: a clean exit (0) is a worker
        stopped by a signal from outside the run, which its log names."""
        if code != 0:
            return describe_exit(code)
        found = STOPPED_ON.findall(self._log_tail(slot, 50))
        by = found[-1] if found else "SIGINT or SIGTERM"
        return f"exited 0 after a {by} the supervisor did not send"

    def _log_tail(self, slot: int, lines: int = 15) -> str:
        """The last ``lines`` lines the workers of ``slot`` wrote in this run (what they
        wrote to their log file too, unless its disk was full)."""
        tee = self._tees.get(slot)
        p = self.procs.get(slot)
        if tee is not None and p is not None and p.poll() is not None:
            tee.join(timeout=5.0)  # (it ends where the worker's output does)
        return "\n".join(list(self._tails.get(slot, ()))[-lines:])

    def add_worker(self) -> int:
        """Start one more worker (it joins the group: a rebalance); returns its slot."""
        slot = max([*self.procs, *self._respawn], default=-1) + 1
        self._spawn(slot)
        return slot

    def remove_worker(self, slot: int) -> None:
        """Ask a worker to commit and leave the group (SIGTERM); it is not replaced."""
        self._respawn.pop(slot, None)
        p = self.procs.pop(slot)
        p.send_signal(signal.SIGTERM)
        self._retiring.append(p)

    def kill_worker(self, slot: int, sig: int = signal.SIGKILL) -> None:
        """For fault-injection tests: signal one worker."""
        self.procs[slot].send_signal(sig)

    def _stop_workers(self, timeout: float = 30.0) -> None:
        procs = [*self.procs.values(), *self._retiring]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    # -- progress ------------------------------------------------------------------------

    def lag(self) -> int:
        """Records not yet committed, over every input queue of every sub-topology."""
        total = 0
        group = self.topology.job_id
        for sub in self.topology.subtopologies:  # upstream first
            for topic in sub.source_topics:
                for q in range(self.queue_counts[topic]):
                    total += self.broker.end_offset(topic, q) - self.broker.committed(
                        group, topic, q
                    )
        return total

    def _done(self) -> bool:
        # Upstream first: once a sub-topology has committed all its input, everything it
        # will ever write downstream is already in the log (it flushes before committing).
        group = self.topology.job_id
        for sub in self.topology.subtopologies:
            for topic in sub.source_topics:
                for q in range(self.queue_counts[topic]):
                    if self.broker.committed(group, topic, q) < self.broker.end_offset(topic, q):
                        return False
        return True

    def _end_of_input_step(self) -> bool:
        """Declare end of input one sub-topology at a time (upstream first), once the
        previous one's tasks all finished and their output is processed. True when all
        are done."""
        eoi = self.root / "coordination" / self.topology.job_id / "eoi"
        eoi.mkdir(parents=True, exist_ok=True)
        for sub in self.topology.subtopologies:
            n = max(self.queue_counts[t] for t in sub.source_topics)
            tasks = [TaskId(sub.id, q) for q in range(n)]
            if not (eoi / str(sub.id)).exists():
                (eoi / str(sub.id)).touch()
                return False
            if not all((eoi / f"{t}.done").exists() for t in tasks):
                return False
        return True

    def _records_out(self) -> int:
        return sum(
            self.broker.end_offset(t, q)
            for t in self.topology.sink_topics
            for q in range(self.queue_counts[t])
        )

    # -- run -----------------------------------------------------------------------------

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

    #: The signal that asked the run to stop (its name), once one did.
    stop_signal: str | None = None

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        self.stop_signal = signal.Signals(signum).name

    def _run(self) -> dict[str, Any]:
        start = time.monotonic()
        # A new bounded run: end of input is declared afresh when this run's input is done.
        shutil.rmtree(self.root / "coordination" / self.topology.job_id / "eoi", ignore_errors=True)
        # Restore progress left by workers of an earlier run that died mid-restore.
        shutil.rmtree(
            self.root / "coordination" / self.topology.job_id / "restore", ignore_errors=True
        )
        self._committed_at_restart = self.broker.group_offsets(self.topology.job_id)
        self.skipped_before = self.skipped()
        self.stats = SupervisorStats(
            self.group_dir, job=self.topology.job_id, pipeline=self.pipeline_path,
            workers_wanted=self.n_workers,
        )  # fmt: skip
        self.stats.clear()
        for slot in range(self.n_workers):
            self._spawn(slot)
        pending = [(inp, inp.chunks(self.chunk_lines, self.follow)) for inp in self.inputs]
        rr = 0
        next_look = next_report = 0.0
        state = "failed"  # unless the loop ends as it should
        try:
            while True:
                if self.stop_signal is not None:
                    raise KeyboardInterrupt
                if self.follow and not pending and time.monotonic() >= next_look:
                    # Unbounded input: look for lines appended since (Ctrl-C ends the run),
                    # first checking that each file still holds what was read of it, as
                    # `tail -F` does: a file truncated, rewritten or replaced stops the run.
                    for i in self.inputs:
                        i.check(follow=True)
                    pending = [(i, i.chunks(self.chunk_lines, True)) for i in self.inputs]
                    next_look = time.monotonic() + 0.5
                self._check_workers()
                ingested = False
                for inp, chunks in list(pending):
                    item = next(chunks, None)
                    if item is None:
                        pending.remove((inp, chunks))
                        self._record_input_end(inp)
                        continue
                    lines, read = item
                    ts = wall_clock_ms()
                    rows: list[tuple[int, None, bytes, tuple[tuple[str, bytes], ...]]]
                    rows = [(ts, None, line, ()) for line in lines]
                    # What was read so far rides on the chunk's last record: the log keeps
                    # both or neither, so a crash can not make them disagree.
                    mark = ((INGEST_HEADER, read.encode()),)
                    rows[-1] = (ts, None, lines[-1], mark)
                    q = rr % inp.queues
                    rr += 1
                    # Chunks go round-robin over the queues, so the newest marker is the
                    # largest one among the queues' last records (what resume looks for).
                    self.broker.append(inp.topic, q, rows)
                    self.broker.flush()
                    inp.mark = read
                    inp.position = read.position
                    inp.lines += len(lines)
                    ingested = True
                    if self.max_ingest_rate:
                        time.sleep(len(lines) / self.max_ingest_rate)
                if self.progress is not None and time.monotonic() >= next_report:
                    self.progress(self.status(start))
                    next_report = time.monotonic() + 0.1
                if self.stats.due():
                    self._publish_stats(start)
                # Done: all input processed and committed, and end of input declared to
                # every sub-topology in turn (it may emit more, processed in turn).
                if not pending and not self.follow and self._done() and self._end_of_input_step():
                    break
                if not ingested:
                    time.sleep(0.02)
            state = "done"
        except KeyboardInterrupt:
            if not self.follow:
                raise
            state = "done"  # following input, this is how a run ends
            log.info(
                "%s: stopping the workers, which commit what they processed",
                self.stop_signal or "interrupted",
            )
        finally:
            self._stop_workers()
            self._publish_stats(start, state)
        return self.status(start)

    def _record_input_end(self, inp: _Input) -> None:
        """The ingest reached the end of ``inp``'s file (for now, if following it): record
        where each of its queues ends, so that tasks that have read that far stop holding
        event time back (see the watermarks module)."""
        group = ingest_group(self.topology.job_id)
        for q in range(inp.queues):
            end = self.broker.end_offset(inp.topic, q)
            if inp.ended_at.get(q) != end:
                self.broker.commit(group, inp.topic, q, end)
                inp.ended_at[q] = end

    def _publish_stats(self, start: float, state: str = "running") -> None:
        assert self.stats is not None
        try:
            status: dict[str, Any] | None = self.status(start)
        except Exception:  # a failing run: its own error is the one to report
            status = None  # (the counts published last stay)
        pids = {slot: p.pid if p.poll() is None else None for slot, p in self.procs.items()}
        try:
            self.stats.publish(status, {**pids, **dict.fromkeys(self._respawn)}, state)
        except OSError as e:
            if state != "failed":
                raise
            # (a full disk: the error that failed the run is the one to report)
            log.warning("could not publish the run's final statistics: %s", e)

    def skipped(self) -> int:
        """Records the job skipped (``--on-error skip`` or ``dead-letter``) in the work it
        committed, over all its runs: what workers counted per task at each commit."""
        group = self.topology.job_id
        total = 0
        for sub in self.topology.subtopologies:
            n = max(self.queue_counts[t] for t in sub.source_topics)
            for q in range(n):
                committed = {
                    t: self.broker.committed(group, t, q)
                    for t in sub.source_topics
                    if q < self.queue_counts[t]
                }
                total += skipped_at(self.group_dir, TaskId(sub.id, q), committed)
        return total

    def status(self, start: float) -> dict[str, Any]:
        return {
            "records_in": sum(i.lines for i in self.inputs),
            "bytes_read": sum(i.position for i in self.inputs),
            # A followed file grows: measured against its size at start, progress would
            # pass 100%.
            "bytes_total": sum(i.current_size() if self.follow else i.size for i in self.inputs),
            "records_out": self._records_out(),
            "lag": self.lag(),
            "elapsed": time.monotonic() - start,
            "workers": sum(p.poll() is None for p in self.procs.values()),
            "restoring": restore_progress(self.root / "coordination" / self.topology.job_id),
        }

    def tables(self) -> dict[str, dict[Any, Any]]:
        """Final table (last value per key) of every sink topic, read from the log."""
        from rstreams.runtime.results import fold_records

        out: dict[str, dict[Any, Any]] = {}
        for topic in self.topology.sink_topics:
            spec = self.topology.topics[topic]
            table: dict[Any, Any] = {}
            for q in range(self.queue_counts[topic]):
                pos = self.broker.start_offset(topic, q)
                while True:
                    records = self.broker.read_columns(topic, q, pos, 200_000)
                    if not len(records):
                        break
                    fold_records(table, records, spec)
                    pos = records.last_offset + 1
            out[topic] = table
        return out

    def close(self) -> None:
        try:
            self.broker.close()
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
    """Run on worker processes over the file log; returns a
    :class:`~rstreams.runtime.results.RunResult`."""
    from rstreams.runtime.results import Progress, RunResult

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
            if config.on_error == "dead-letter":
                topic = dead_letter_topic(topology.job_id)
                log.warning(
                    "%d record(s) failed and were dead-lettered to the topic %r of the "
                    "job's log; read them with `rstreams consume %s --from-beginning "
                    "--data-dir %s`",
                    skipped,
                    topic,
                    topic,
                    shlex.quote(str(sup.root.parent)),
                )
            else:
                log.warning(
                    "%d record(s) failed and were skipped; the worker logs name each: %s",
                    skipped,
                    sup.root / "logs",
                )
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
    return RunResult(
        tables, status["records_in"], status["records_out"], status["elapsed"], metrics, stale
    )
