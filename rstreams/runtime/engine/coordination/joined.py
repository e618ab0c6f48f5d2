"""``rstreams run --join``: workers for a job another run over the same broker owns.

The run that started the job (``rstreams run ... --broker URL``, maybe on another host)
holds its job lock in the broker, reads the inputs and decides when a bounded run is
over. A joining run only starts worker processes here, which join the job's consumer
group: the tasks spread over the workers of every host, each host restoring the state of
the tasks it gets from their changelogs into its own ``--data-dir``. It ends when the
run it joined ends (its job lock is gone), stopping its workers, and reads the final
tables from the broker as that run does.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from rstreams import interrupts
from rstreams.config import RunConfig, default_workers
from rstreams.errors import JobRunningError, RStreamsError
from rstreams.planner.topology import DEFAULT_SHUFFLE_QUEUES, Topology
from rstreams.runtime.engine.coordination.collect import Collector
from rstreams.runtime.engine.coordination.local import create_topics
from rstreams.runtime.engine.coordination.workerpool import WorkerPool
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.layout import JobLayout
from rstreams.runtime.queues.brokers import (
    broker_target,
    check_broker_permissions,
    claim_local_state,
    open_broker,
    open_eoi_flags,
    open_job_lock,
    redis_client,
)
from rstreams.runtime.topology_guard import check_joined_topology

log = logging.getLogger("rstreams.supervisor")

#: Seconds between two looks at whether the joined run still holds its job lock.
LOOK_EVERY = 0.2


class JobNotRunningError(JobRunningError):
    """``--join`` found no run of the job to join."""


class JoinedRunGoneError(RStreamsError):
    """The run a ``--join`` run joined ended before its bounded input was processed."""


class JoinedRun:
    """Worker processes joining job ``topology.job_id`` on ``config.broker``."""

    def __init__(self, pipeline_path: str, topology: Topology, config: RunConfig) -> None:
        job = topology.job_id
        self.config = config
        self.topology = topology
        self.layout = JobLayout.of(config.durable_data_dir, job)
        check_broker_permissions(config, job)
        self.lock = open_job_lock(self.layout.data_dir, job, config)
        if self.lock.holder() is None:
            raise JobNotRunningError(
                f"no run of job {job!r} to join on {broker_target(config).redacted}: start "
                "one with `rstreams run PIPELINE --broker URL --input ...` (without --join), "
                "then join it"
            )
        # The same topology and code as the run it joins, or nothing.
        check_joined_topology(redis_client(config), topology, self.lock.holder)
        self.layout.root.mkdir(parents=True, exist_ok=True)
        claim_local_state(self.layout, config)
        self.broker = open_broker(self.layout.root, config)
        engine = EngineConfig.of(config, default_queues=DEFAULT_SHUFFLE_QUEUES)
        # (the topics exist, or are being created with these counts by the joined run)
        self.queue_counts = create_topics(topology, self.broker, engine)
        self.pool = WorkerPool(
            config.replace(pipeline=pipeline_path), self.layout,
            committed=lambda: self.broker.group_offsets(job),
        )  # fmt: skip
        self.collector = Collector(
            self.broker, topology, self.queue_counts, self.layout.coordination
        )
        self.eoi = open_eoi_flags(self.layout.coordination, job, config)
        self._stop: str | None = None

    def run(self, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Run workers until the joined run ends; returns counts. SIGINT or SIGTERM stop
        this host's workers (they commit and leave) and raise KeyboardInterrupt, unless
        the run follows its input (then that is how it ends)."""
        start = time.monotonic()
        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {
                s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)
            }
        self.pool.start(self.config.workers or default_workers())
        try:
            while self._stop is None and self.lock.holder() is not None:
                self.pool.check()
                if progress is not None:
                    progress(self.status(start))
                time.sleep(LOOK_EVERY)
            if self._stop is not None:
                log.info("%s: stopping this host's workers", self._stop)
                if not self.config.follow:
                    # Exit 0 means exact: the joined run goes on, so what is committed now
                    # is a part of the answer. Stopped early, a joining run fails as a
                    # plain one does (exit 130 on SIGINT, 143 on SIGTERM) once its
                    # workers committed and left.
                    raise KeyboardInterrupt
            elif not self._input_done() and not self.config.follow:
                # Exit 0 means exact: tables read now would be a part of the answer.
                raise JoinedRunGoneError(
                    f"the run of job {self.topology.job_id!r} this one joined is gone before "
                    "its input was all processed (it was stopped, or died): start it again "
                    "(`rstreams run PIPELINE --broker URL ...` without --join) to go on from "
                    "its last commit; this host's workers stopped and wrote no table"
                )
        finally:
            self.pool.stop()
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        return self.status(start)

    def _input_done(self) -> bool:
        """Did every task of the job finish its input (a bounded run that ended)?"""
        return all(self.eoi.declared(sub.id) for sub in self.topology.subtopologies)

    def _on_signal(self, signum: int, frame: Any) -> None:
        interrupts.note(signum)  # (the command's exit code: 130 for SIGINT, 143 SIGTERM)
        self._stop = signal.Signals(signum).name

    def status(self, start: float) -> dict[str, Any]:
        """What this host's part of the run looks like now."""
        return {
            "records_in": 0,
            "records_out": self.collector.records_out(),
            "elapsed": time.monotonic() - start,
            "workers": self.pool.alive(),
        }

    def close(self) -> None:
        self.broker.close()
