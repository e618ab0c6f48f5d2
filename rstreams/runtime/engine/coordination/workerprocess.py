"""A worker process of the durable runtime.

``python -m rstreams.runtime.engine.coordination.workerprocess CONFIG.json`` (how the
supervisor starts one, with ``-`` for the launch on standard input) runs :func:`main`,
which reads its :class:`WorkerLaunch`, builds its
:class:`~rstreams.runtime.engine.coordination.worker.Worker` from it (the run's tree of
options: its engine with ``EngineConfig.of``, its timing from the worker section), runs
it until stopped and ends with an exit report the supervisor reads."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any

from rstreams.errors import ProcessingError, RStreamsError, StorageError
from rstreams.runtime import gctune
from rstreams.runtime.engine.coordination.exitreport import (
    EXIT_FATAL,
    EXIT_PROCESSING_ERROR,
    ExitReport,
)
from rstreams.runtime.engine.coordination.launch import WorkerLaunch
from rstreams.runtime.engine.coordination.worker import Worker, new_member_id
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.layout import GroupLayout, JobLayout
from rstreams.runtime.queues.brokers import (
    WORKER_PATIENCE,
    open_broker,
    open_eoi_flags,
    open_membership,
    set_connect_patience,
)

log = logging.getLogger("rstreams.worker")


def main(argv: list[str] | None = None) -> int:
    """Run one worker. Exit codes: 0 stopped (SIGTERM/SIGINT, or the supervisor is
    gone), 3 a record failed processing, 4 another rstreams error (a bad configuration
    too) or a full or failing disk (fatal: a restart would meet it again), 1 an
    unexpected exception (traceback; restarted)."""
    ap = argparse.ArgumentParser(prog="rstreams-worker", description="One embedded-runtime worker.")
    ap.add_argument(
        "launch",
        metavar="CONFIG.json",
        help="the worker's configuration (a WorkerLaunch as JSON): a file, or - to read it "
        "from standard input, as `rstreams run` gives it",
    )
    args = ap.parse_args(argv)
    stopped_on: list[str] = []
    worker: Worker | None = None
    launch: WorkerLaunch | None = None

    def on_signal(signum: int, frame: Any) -> None:
        stopped_on.append(signal.Signals(signum).name)
        if worker is not None:
            worker.stop()

    # Before loading the pipeline: a worker asked to stop while it starts exits 0 without
    # joining (it holds nothing yet), as one asked later does after leaving.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        launch = WorkerLaunch.read(args.launch)
        logging.basicConfig(
            level=launch.log_level,
            format=f"%(levelname)s worker[{os.getpid()}] %(name)s: %(message)s",
        )
        set_connect_patience(WORKER_PATIENCE)  # (restarted while a Redis restarts)
        worker = _make_worker(launch)
        gctune.tune()
        if not stopped_on:
            worker.run()
        if stopped_on:
            # Reported for the supervisor, which tells a stop it asked for from another.
            log.warning("%s: stopped on %s", worker.member_id, stopped_on[0])
            return ExitReport(0, stopped_on=stopped_on[0]).tell()
    # The worker's last line, its exit report: the supervisor reports it as the run's error.
    except ProcessingError as e:
        return ExitReport.of(e, EXIT_PROCESSING_ERROR).tell()
    except RStreamsError as e:
        return ExitReport.of(e, EXIT_FATAL).tell()
    except OSError as e:
        if e.errno not in StorageError.ERRNOS:
            raise  # unexpected: a traceback, and a restart
        # A restart would meet the full (or failing) disk again.
        return ExitReport.of(StorageError.of(e), EXIT_FATAL).tell()
    except Exception as e:
        refused = None if launch is None else _redis_refusal(e, launch)
        if refused is None:
            raise  # unexpected: a traceback, and a restart
        return ExitReport.of(refused, EXIT_FATAL).tell()
    return 0


def _redis_refusal(e: Exception, launch: WorkerLaunch) -> RStreamsError | None:
    """What Redis refused that a restart would meet again (it is out of memory, or the
    user lacks a permission), as the one line the run reports; None for anything else
    (a lost connection: the restarted worker waits for the server)."""
    if not type(e).__module__.startswith("redis") or launch.config.broker is None:
        return None
    import redis.exceptions as rx

    if not isinstance(e, (rx.OutOfMemoryError, rx.NoPermissionError)):
        return None
    from rstreams.brokeropts import RedisRunError, redis_error_text
    from rstreams.runtime.queues.brokers import broker_target

    text = redis_error_text(e, broker_target(launch.config))
    return None if text is None else RedisRunError(text)


def _make_worker(launch: WorkerLaunch) -> Worker:
    from rstreams.loader import load_topology

    run = launch.config
    assert run.pipeline is not None  # (WorkerLaunch refuses a config without one)
    topology = load_topology(run.pipeline)
    config = run.worker_config()
    member = launch.member or new_member_id()
    group, root = topology.job_id, launch.job_dir
    worker = Worker(
        topology,
        open_broker(root, run),
        root,
        member_id=member,
        membership=open_membership(root, group, member, config.session_timeout, run),
        eoi=open_eoi_flags(GroupLayout.of(root, group), group, run),
        engine=EngineConfig.of(
            run,
            coalesce=True,
            combine=True,
            state_dir=str(JobLayout.at(launch.job_dir).state),
            caught_up_idle=True,  # its sources are input files, read by the ingest
        ),
        config=config,
    )
    worker.parent_pid = launch.parent_pid
    log.info("%s: %s", worker.member_id, config)
    return worker


if __name__ == "__main__":
    sys.exit(main())
