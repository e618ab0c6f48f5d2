"""The terminal side of the live view: ``rstreams top`` (refreshing the dashboard until
Ctrl-C), and the progress of ``rstreams run`` (a bar, plain lines, or ``--live``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import attrs
from rich.console import Console

from rstreams.brokeropts import JobAccess, add_broker_options
from rstreams.config import DEFAULT_DATA_DIR
from rstreams.errors import ConfigError, RStreamsError
from rstreams.live.render import plain_line, render
from rstreams.live.snapshot import LiveSnapshot, pick_job, published_tree, snapshot
from rstreams.progress import RunProgress, progress_text
from rstreams.runtime.engine.coordination.stats import PUBLISH_INTERVAL, read_stats
from rstreams.runtime.engine.tasks.lifecycle import SupervisorState
from rstreams.runtime.layout import JobLayout, job_id_arg

__all__ = ["LiveRunView", "LiveWatcher", "RunProgress", "add_parsers", "progress_text", "run_top"]


# -- refreshing ---------------------------------------------------------------------------


class _Pacer:
    """Keeps the snapshot to measure rates against: the newest at least ``span`` seconds
    older than the current one, so that rates span more than one publication (about
    one a second) and do not jump when a refresh sees a file twice."""

    def __init__(self, span: float) -> None:
        self.span = span
        self.recent: list[LiveSnapshot] = []

    def push(self, snap: LiveSnapshot) -> LiveSnapshot | None:
        older = [s for s in self.recent if snap.time - s.time >= self.span]
        previous = older[-1] if older else None
        self.recent = [s for s in self.recent if snap.time - s.time < 4 * self.span] + [snap]
        return previous


class LiveWatcher:
    """Snapshots of one job, with the previous one for rates and the topology tree taken
    once: the one the job published as data, or the ``topology`` given (the run's own
    for ``rstreams run --live``, or a pipeline the user named on the command line)."""

    def __init__(
        self,
        data_dir: str,
        job: str,
        span: float = 2.0,
        access: JobAccess | None = None,
        topology: Any = None,
    ) -> None:
        self.data_dir, self.job, self.access = data_dir, job, access
        self._pacer = _Pacer(span)
        self._topology: Any = topology
        self._note: str | None = None

    def take(self) -> tuple[LiveSnapshot, LiveSnapshot | None]:
        if self._topology is None:
            coord = JobLayout.of(self.data_dir, self.job).coordination.dir
            supervisor = read_stats(coord).supervisor
            if supervisor is not None:  # (until it publishes, the tree is not known)
                tree, self._note = published_tree(supervisor)
                self._topology = tree if tree is not None else False
        topology = False if self._topology is None else self._topology
        snap = snapshot(self.data_dir, self.job, topology=topology, access=self.access)
        if topology is False:
            snap = attrs.evolve(snap, note=self._note)
        return snap, self._pacer.push(snap)

    def set_topology(self, topology: Any) -> None:
        self._topology = topology


#: Seconds between two looks at the supervisor's statistics while ``--once`` waits.
_POLL = 0.1


def _await_publication(coord: Any, first: LiveSnapshot, span: float) -> None:
    """Wait until the job's supervisor has published statistics ``span`` seconds (by its
    own clock) after those in ``first``, so that the rates of ``rstreams top --once``
    span that much of the job's work, however late a busy supervisor publishes; or until
    the job ended, or the supervisor is more than two publications late (then the
    rates cover what it did publish, or are unknown)."""
    assert first.supervisor is not None
    since = float(first.supervisor["time"])
    deadline = time.monotonic() + span + 2 * PUBLISH_INTERVAL
    while time.monotonic() < deadline:
        time.sleep(_POLL)
        sup = read_stats(coord).supervisor
        if sup is None or sup.get("state") != SupervisorState.RUNNING:
            return
        if float(sup["time"]) >= since + span:
            return


def run_top(
    data_dir: str,
    job: str | None = None,
    refresh: float = 1.0,
    once: bool = False,
    *,
    console: Console | None = None,
    access: JobAccess | None = None,
    pipeline: str | None = None,
) -> int:
    """Watch a job until Ctrl-C: the dashboard when ``console`` (stdout) is a terminal,
    else one :func:`plain_line` per refresh until the job ends. ``once``: one view and
    return (while the job runs, of two snapshots for its rates: the second once the
    supervisor published statistics two seconds, or ``refresh``, after the first).
    ``access``: the job on a Redis broker (then ``job`` is its job).
    ``pipeline``: a pipeline file the user names, loaded for the tree (else the tree the
    job published; no file named in the data directory is ever loaded)."""
    from rich.live import Live

    if refresh <= 0:
        raise ConfigError(f"--refresh must be > 0 seconds; got {refresh}")
    job = pick_job(data_dir, job) if access is None else access.job
    console = console or Console()
    topology = None
    if pipeline is not None:
        from rstreams.loader import load_topology

        topology = load_topology(pipeline)
        if topology.job_id != job:
            raise ConfigError(
                f"--pipeline {pipeline} is job {topology.job_id!r}, not {job!r}: name the "
                "pipeline of the job you watch"
            )
    watcher = LiveWatcher(
        data_dir, job, span=max(2.0, 2 * refresh), access=access, topology=topology
    )
    snap, previous = watcher.take()
    if once:
        if snap.running:
            coord = JobLayout.of(data_dir, job).coordination.dir
            _await_publication(coord, snap, span=max(refresh, 2.0))
            previous, (snap, _) = snap, watcher.take()
        if console.is_terminal:
            console.print(render(snap, previous))
        else:
            print(plain_line(snap, previous), flush=True)
        return 0
    if not console.is_terminal:
        while True:
            print(plain_line(snap, previous), flush=True)
            if snap.supervisor is not None and not snap.running:
                return 0
            time.sleep(refresh)
            snap, previous = watcher.take()
    with Live(render(snap, previous), console=console, auto_refresh=False, screen=False) as live:
        while True:
            time.sleep(refresh)
            snap, previous = watcher.take()
            live.update(render(snap, previous), refresh=True)


# -- the command --------------------------------------------------------------------------


def cmd_top(args: Any) -> int:
    from rstreams.brokeropts import broker_errors, pick_redis_job, target_of
    from rstreams.runtime.results import check_data_dir

    target = target_of(args)
    if target is not None:  # the job's topics and group in Redis, statistics of this host
        with broker_errors(target):
            access = pick_redis_job(args, None, "", "rstreams top JOB")
            try:
                if not access.exists():
                    raise ConfigError(f"no job {access.job!r} in {target.redacted}")
                return run_top(
                    args.data_dir, access.job, args.refresh, args.once, access=access,
                    pipeline=args.pipeline,
                )  # fmt: skip
            finally:
                access.close()
    # (a data directory that does not exist: "no job" says more than "can not be created")
    check_data_dir(args.data_dir, write=os.path.exists(args.data_dir))
    return run_top(
        args.data_dir, args.job, refresh=args.refresh, once=args.once, pipeline=args.pipeline
    )


def add_parsers(sub: Any, common: Callable[[Any], None]) -> None:
    """Register ``rstreams top``."""
    import argparse

    p = sub.add_parser(
        "top",
        help="watch a running job: steps, workers, queues, state stores",
        description="""\
A live dashboard of a job of the embedded runtime, refreshed from what its
supervisor and workers publish under the data directory: records per second
per step, each queue's lag and owning worker, the group's generation and
members, state store sizes and restore progress, commit latency, late and
skipped records, the last errors. It works from another terminal while
`rstreams run` goes on. When stdout is not a terminal it prints one plain line
per refresh instead, and stops when the job ends.

exit codes: 0 ok, 1 the job's files can not be read, 2 bad usage (e.g. no
such job, or several jobs and no JOB given), 130 interrupted (Ctrl-C), 143
stopped by SIGTERM""",
        epilog="""\
example:
  rstreams run examples/wordcount.py --input big.txt --workers 2   # one terminal
  rstreams top wordcount                                          # another one
  rstreams top --once > status.txt                                # one line, for scripts

`rstreams run --live` shows the same dashboard in the terminal of the run.""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "job", nargs="?", metavar="JOB", type=job_id_arg,
        help="the job id (default: the only job)",
    )  # fmt: skip
    p.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR", help=f"default ./{DEFAULT_DATA_DIR}"
    )
    p.add_argument(
        "--refresh", type=float, default=1.0, metavar="SECONDS", help="between updates (default 1)"
    )
    p.add_argument("--once", action="store_true", help="show one view and exit (for scripts)")
    p.add_argument(
        "--pipeline",
        metavar="PIPELINE.py",
        help="draw the topology from this pipeline file (loaded, so its code runs); by "
        "default the tree the job published as data: top never loads a file that the "
        "data directory names",
    )
    add_broker_options(p)
    common(p)
    p.set_defaults(func=cmd_top)


# -- rstreams run: progress and --live ----------------------------------------------------


class LiveRunView:
    """``rstreams run --live``: the dashboard of :func:`render` on stderr while the run
    goes on in this process, refreshed from its progress callback every ``refresh``
    seconds (one :func:`plain_line` per refresh when stderr is not a terminal). The last
    view stays on screen after the run."""

    def __init__(
        self,
        data_dir: str,
        job: str,
        topology: Any = None,
        refresh: float = 1.0,
        console: Console | None = None,
    ) -> None:
        self.watcher = LiveWatcher(data_dir, job, span=max(2.0, 2 * refresh))
        if topology is not None:
            self.watcher.set_topology(topology)
        self.refresh = refresh
        self.console = console or Console(stderr=True)
        self._live: Any = None
        self._next = 0.0

    def __call__(self, p: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.refresh
        try:
            snap, previous = self.watcher.take()
        except RStreamsError:
            return  # the job's directory is being created: the next refresh shows it
        if not self.console.is_terminal:
            print(plain_line(snap, previous), file=self.console.file, flush=True)
            return
        if self._live is None:
            from rich.live import Live

            self._live = Live(console=self.console, auto_refresh=False, redirect_stdout=False)
            self._live.start()
        self._live.update(render(snap, previous), refresh=True)

    def done(self) -> None:
        if self._live is not None:
            try:
                snap, previous = self.watcher.take()
                self._live.update(render(snap, previous), refresh=True)
            except RStreamsError:
                pass
            self._live.stop()
            self._live = None
