"""The worker processes of a durable run: spawn, restart with a backoff, stop.

A :class:`WorkerPool` keeps one worker process per slot. Each worker runs in a session
of its own and its output (stdout and stderr) comes through a pipe: a thread copies it
to the slot's log file and keeps its last lines, so the pool can say why a worker
stopped even when the log file can not be written (a full disk).

:meth:`WorkerPool.check` looks at the workers between two steps of the run:

- a worker that stopped on an error a restart would meet again (a record that failed:
  exit code 3; another rstreams error such as a corrupt log: exit code 4; options it
  refused: exit code 2) ends the run at once with that error, rebuilt from the worker's
  exit report (see the exitreport module);
- a worker that died otherwise (killed by a signal, an unexpected exception: exit code
  1, or exit code 0 after a signal the run did not send) is restarted after a backoff
  (0.1 s doubling up to ``max_restart_backoff``, 5 s by default; it rejoins the group,
  the others take its tasks over meanwhile), and the run gives up after
  ``max_restarts`` restarts in a row during which the job committed nothing.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from rstreams.config import RunConfig
from rstreams.errors import RStreamsError
from rstreams.runtime.engine.coordination.exitreport import (
    EXIT_FATAL,
    EXIT_PROCESSING_ERROR,
    EXIT_USAGE,
    ExitReport,
    describe_exit,
    worker_error,
)
from rstreams.runtime.engine.coordination.launch import WorkerLaunch, log_level_of
from rstreams.runtime.engine.coordination.stats import SupervisorStats
from rstreams.runtime.layout import JobLayout

log = logging.getLogger("rstreams.supervisor")

#: Restarts wait this long, doubling after each restart without progress, up to the cap
#: (RunConfig.max_restart_backoff).
RESTART_BACKOFF = 0.1
#: Lines of each worker's output the pool keeps (for the errors it reports).
TAIL_LINES = 200
#: Exit codes of a worker that a restart would meet again: they end the run.
FINAL_EXITS = (EXIT_PROCESSING_ERROR, EXIT_FATAL, EXIT_USAGE)

#: The group's committed offsets, per (topic, queue).
Offsets = dict[tuple[str, int], int]


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


class WorkerPool:
    """Worker processes of one job, one per slot, restarted when they die.

    ``committed`` returns the group's committed offsets: a restart after which they
    moved on was one after progress. ``config`` is what every worker is told.
    """

    def __init__(
        self,
        config: RunConfig,
        layout: JobLayout,
        *,
        committed: Callable[[], Offsets],
    ) -> None:
        #: What every worker is told (its pipeline file included), as a typed config.
        self.config = config
        self.layout = layout
        self.root = layout.root
        self.max_restarts = config.max_restarts
        self.max_backoff = config.max_restart_backoff
        self.committed = committed
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        #: Restarts in a row without progress, and how each of those workers ended.
        self.failures: list[str] = []
        #: Replacement workers started in the whole run (``failures`` is reset by progress).
        self.restarts = 0
        self.backoff = RESTART_BACKOFF
        #: Workers started, replacements included (the member id's counter).
        self.spawned = 0
        #: Told of every worker started, once the run publishes statistics.
        self.stats: SupervisorStats | None = None
        #: Slots whose replacement worker starts at this (monotonic) time.
        self._respawn: dict[int, float] = {}
        #: The group's committed offsets when a worker was last (re)started.
        self._committed_at_restart: Offsets = {}
        self._retiring: list[subprocess.Popen[bytes]] = []
        #: Per slot: the last lines its workers wrote, and the thread copying them.
        self._tails: dict[int, collections.deque[str]] = {}
        self._tees: dict[int, threading.Thread] = {}

    def start(self, workers: int) -> None:
        """Start ``workers`` workers, in slots 0 to ``workers - 1``."""
        self._committed_at_restart = self.committed()
        self.layout.logs.mkdir(parents=True, exist_ok=True)
        for slot in range(workers):
            self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        self.spawned += 1
        member = f"w{slot}-{self.spawned}"
        if self.config.broker is not None:
            # The group spans hosts (--join): each host's slots need names of their own.
            member = f"{socket.gethostname()}-{os.getpid()}-{member}"
        # Its configuration comes on its stdin, typed (never as arguments anyone can read).
        launch = WorkerLaunch(
            config=self.config,
            job_dir=str(self.root),
            member=member,
            parent_pid=os.getpid(),
            log_level=log_level_of(log),
        )
        cmd = [sys.executable, "-m", "rstreams.runtime.engine.coordination.workerprocess", "-"]
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
            target=_tee, args=(p.stdout, self.layout.worker_log(slot), tail),
            name=f"worker-{slot}-output", daemon=True,
        )  # fmt: skip
        self._tees[slot].start()
        if self.stats is not None:
            self.stats.spawned(slot)

    # -- supervision ---------------------------------------------------------------------

    def _progressed(self) -> bool:
        """Did the job commit anything since a worker was last (re)started?"""
        now = self.committed()
        before = self._committed_at_restart
        return any(off > before.get(tq, 0) for tq, off in now.items())

    def check(self) -> None:
        """Start the replacements that are due; raise the error of a worker that stopped
        on one a restart would meet again, or once restarts without progress exceed
        ``max_restarts``; schedule a replacement for any other worker that died."""
        now = time.monotonic()
        for slot, due in list(self._respawn.items()):
            if now >= due:
                del self._respawn[slot]
                self._committed_at_restart = self.committed()
                self._spawn(slot)
        for slot, p in list(self.procs.items()):
            code = p.poll()
            if code is None or slot in self._respawn:
                continue
            if code in FINAL_EXITS:
                raise worker_error(code, self._report(slot, code))
            self._schedule_restart(slot, code, now)

    def _schedule_restart(self, slot: int, code: int, now: float) -> None:
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
                f"({self.layout.worker_log(slot)}):\n{self._log_tail(slot)}"
            )
        log.warning(
            "worker %d %s; starting a replacement in %.1fs", slot, self.failures[-1],
            self.backoff,
        )  # fmt: skip
        self._respawn[slot] = now + self.backoff
        self.restarts += 1
        self.backoff = min(self.backoff * 2, self.max_backoff)

    def _why_exited(self, slot: int, code: int) -> str:
        """How a worker the supervisor did not stop ended: a clean exit (0) is a worker
        stopped by a signal from outside the run, which its exit report names."""
        if code != 0:
            return describe_exit(code)
        report = self._report(slot, code)
        by = report.stopped_on if report is not None and report.stopped_on else None
        return f"exited 0 after a {by or 'SIGINT or SIGTERM'} the supervisor did not send"

    def _report(self, slot: int, code: int) -> ExitReport | None:
        """The exit report of the worker of ``slot`` that exited with ``code``."""
        self._log_tail(slot, 0)  # (waits for the rest of its output)
        return ExitReport.last_in(self._tails.get(slot, ()), code)

    def _log_tail(self, slot: int, lines: int = 15) -> str:
        """The last ``lines`` lines the workers of ``slot`` wrote in this run (what they
        wrote to their log file too, unless its disk was full)."""
        tee = self._tees.get(slot)
        p = self.procs.get(slot)
        if tee is not None and p is not None and p.poll() is not None:
            tee.join(timeout=5.0)  # (it ends where the worker's output does)
        return "\n".join(list(self._tails.get(slot, ()))[-lines:]) if lines else ""

    # -- changes -------------------------------------------------------------------------

    def alive(self) -> int:
        """Workers running now."""
        return sum(p.poll() is None for p in self.procs.values())

    def pids(self) -> dict[int, int | None]:
        """Per slot, the pid of its running worker (None: dead, or restarting)."""
        pids = {slot: p.pid if p.poll() is None else None for slot, p in self.procs.items()}
        return {**pids, **dict.fromkeys(self._respawn)}

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

    def stop(self, timeout: float = 30.0) -> None:
        """Ask every worker to commit and leave (SIGTERM); kill those still running after
        ``timeout`` seconds."""
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
