"""Prometheus metrics of a running embedded job (``rstreams run --metrics-port PORT``).

Every scrape reads the statistics the job's supervisor and workers publish (see
:mod:`rstreams.runtime.engine.coordination.stats`) and turns them into metric families: nothing is
kept between scrapes, and the server needs nothing from the run but its coordination
directory. docs/operations.md lists the metrics.

``prometheus_client`` is an optional dependency (``pip install 'rstreams[ops]'``),
imported only here.
"""

from __future__ import annotations

import logging
import os
import socketserver
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from rstreams.errors import ConfigError
from rstreams.runtime.engine.coordination.stats import JobStats, read_stats
from rstreams.runtime.engine.tasks.lifecycle import SupervisorState

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("rstreams.metrics")

#: A supervisor that published nothing for this long is taken as stuck by ``/healthz``.
HEALTH_MAX_AGE = 10.0

INSTALL_HINT = "pip install 'rstreams[ops]'"

#: Labels of the per-queue gauges (after ``job``).
_QUEUE_LABELS = ["worker", "task", "topic", "queue"]


def require_prometheus_client() -> None:
    """Raise a :class:`~rstreams.errors.ConfigError` saying how to install
    ``prometheus_client`` if it is missing."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"--metrics-port needs the prometheus_client package: {INSTALL_HINT}"
        ) from None


def health(stats: JobStats, now: float | None = None) -> tuple[bool, str]:
    """(healthy, reason): a supervisor runs the job, published lately, and all the
    workers it wants are alive.

    >>> health(JobStats(None, [], 0.0))
    (False, 'no run of this job is publishing statistics')
    """
    sup = stats.supervisor
    if sup is None:
        return False, "no run of this job is publishing statistics"
    if sup.get("state") != SupervisorState.RUNNING:
        return False, f"the run is {sup.get('state')}"
    age = (time.time() if now is None else now) - float(sup.get("time", 0))
    if age > HEALTH_MAX_AGE:
        return False, f"the supervisor published nothing for {age:.0f} s"
    workers = sup.get("workers", [])
    dead = [w["slot"] for w in workers if not w.get("alive")]
    alive = len(workers) - len(dead)
    wanted = int(sup.get("workers_wanted", 0))
    if dead or alive < wanted:
        which = f" (dead: slot {', '.join(map(str, dead))})" if dead else ""
        return False, f"{alive} of {wanted} workers alive{which}"
    return True, "ok"


class JobCollector:
    """A ``prometheus_client`` collector of one job's statistics.

    ``coord_dir`` is the job's coordination directory
    (:func:`~rstreams.runtime.engine.coordination.stats.coordination_dir`); ``job`` the value of
    the ``job`` label (default: that directory's name, the job id).
    """

    def __init__(self, coord_dir: str | os.PathLike[str], job: str | None = None) -> None:
        self.coord_dir = Path(coord_dir)
        self.job = job or self.coord_dir.name

    def describe(self) -> Iterable[Metric]:
        return []  # families are known only from what the job published

    def collect(self) -> Iterator[Metric]:
        return iter(families(read_stats(self.coord_dir), self.job))


def families(stats: JobStats, job: str) -> list[Metric]:
    """The metric families of ``stats`` (see docs/operations.md for the list)."""
    return [
        *_supervisor_families(stats, job),
        *_worker_counters(stats, job),
        *_detail_families(stats, job),
    ]


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    from prometheus_client.core import CounterMetricFamily

    return CounterMetricFamily(name, doc, labels=["job", *labels])


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, doc, labels=["job", *labels])


def _supervisor_families(stats: JobStats, job: str) -> list[Metric]:
    """Whether the job runs and, while a supervisor publishes, the run's totals."""
    out: list[Metric] = []
    sup = stats.supervisor
    running = _gauge("rstreams_running", "1 while a supervisor runs the job", [])
    running.add_metric([job], 1.0 if stats.running else 0.0)
    out.append(running)
    if sup is not None:
        for name, kind, key, doc in (
            ("rstreams_input_records", _counter, "records_in", "Input lines ingested by this run"),
            ("rstreams_input_bytes", _counter, "bytes_read", "Input bytes ingested by this run"),
            ("rstreams_input_size_bytes", _gauge, "bytes_total", "Size of the input files"),
            ("rstreams_output_records", _counter, "records_out", "Records in the sink topics"),
            ("rstreams_lag", _gauge, "lag", "Records not yet committed, over every input queue"),
            ("rstreams_generation", _gauge, "generation", "Consumer group generation"),
            ("rstreams_workers_wanted", _gauge, "workers_wanted", "Worker processes wanted"),
        ):
            family = kind(name, doc, [])
            family.add_metric([job], float(sup.get(key) or 0))
            out.append(family)
        workers = _gauge("rstreams_workers", "Worker processes alive", [])
        workers.add_metric([job], float(sum(1 for w in sup["workers"] if w.get("alive"))))
        restarts = _counter("rstreams_worker_restarts", "Restarts of dead workers", ["slot"])
        for w in sup["workers"]:
            restarts.add_metric([job, str(w["slot"])], float(w.get("restarts", 0)))
        out += [workers, restarts]
    return out


#: The counters of each worker: (metric, help, key of the worker's statistics).
_WORKER_COUNTERS = (
    ("rstreams_processed_records", "Input records processed by a worker", "processed"),
    ("rstreams_restore_records", "Changelog records replayed into state", "restored_records"),
    ("rstreams_late_records", "Records too late for their window or join", "late"),
    ("rstreams_skipped_records", "Records that failed and were skipped", "skipped"),
    (
        "rstreams_null_key_records",
        "Records whose join or grouping key was None: dropped, or joined with nothing",
        "null_keys",
    ),
    (
        "rstreams_dead_lettered_records",
        "Records that failed and went to the dead-letter topic",
        "dead_lettered",
    ),
)


def _worker_counters(stats: JobStats, job: str) -> list[Metric]:
    out: list[Metric] = []
    for name, doc, key in _WORKER_COUNTERS:
        family = _counter(name, doc, ["worker"])
        for w in stats.workers:
            family.add_metric([job, w["member"]], float(w.get(key, 0)))
        out.append(family)
    return out


def _detail_families(stats: JobStats, job: str) -> list[Metric]:
    """Per step, queue, task and store of each worker, and its commit durations."""
    from prometheus_client.core import HistogramMetricFamily

    steps_in = _counter("rstreams_step_records_in", "Records a step received", ["worker", "step"])
    steps_out = _counter(
        "rstreams_step_records_out", "Records a step passed on", ["worker", "step"]
    )
    lag = _gauge("rstreams_queue_lag", "Records of a queue not processed yet", _QUEUE_LABELS)
    position = _gauge("rstreams_queue_position", "Next offset a task processes", _QUEUE_LABELS)
    restoring = _gauge(
        "rstreams_restore_remaining_records",
        "Changelog offsets a task still replays before it starts",
        ["worker", "task"],
    )
    watermark = _gauge(
        "rstreams_watermark_seconds", "Event time a task's input got to", ["worker", "task"]
    )
    entries = _gauge(
        "rstreams_store_entries", "Entries of a state store (estimate)", ["worker", "store", "task"]
    )
    size = _gauge(
        "rstreams_store_bytes", "Bytes of a state store (RocksDB)", ["worker", "store", "task"]
    )
    commits = HistogramMetricFamily(
        "rstreams_commit_duration_seconds",
        "Duration of a worker's commits",
        labels=["job", "worker"],
    )
    for w in stats.workers:
        member = w["member"]
        for step, c in w.get("steps", {}).items():
            steps_in.add_metric([job, member, step], float(c["in"]))
            steps_out.add_metric([job, member, step], float(c["out"]))
        for tid, t in w.get("tasks", {}).items():
            for name, q in t.get("queues", {}).items():
                topic, _, queue = name[:-1].rpartition("[")
                labels = [job, member, tid, topic, queue]
                lag.add_metric(labels, float(q["lag"]))
                position.add_metric(labels, float(q["position"]))
            if t.get("restoring"):
                done, total = t["restoring"]
                restoring.add_metric([job, member, tid], float(total - done))
            if t.get("watermark") is not None:
                watermark.add_metric([job, member, tid], t["watermark"] / 1000)
        for key, s in w.get("stores", {}).items():
            store, _, tid = key.rpartition("@")
            entries.add_metric([job, member, store, tid], float(s["entries"]))
            if s.get("bytes") is not None:
                size.add_metric([job, member, store, tid], float(s["bytes"]))
        c = w.get("commits")
        if c:
            buckets = [(_bound(b), float(n)) for b, n in c["buckets"]]
            commits.add_metric([job, member], buckets, float(c["seconds_sum"]))
    return [steps_in, steps_out, lag, position, restoring, watermark, entries, size, commits]


def _bound(b: Any) -> str:
    return "+Inf" if b == "+Inf" else repr(float(b))


# -- the HTTP server -------------------------------------------------------------------------


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class MetricsServer:
    """Serves ``/metrics`` (Prometheus text exposition) and ``/healthz`` of the job
    whose coordination directory is ``coord_dir``, on ``host:port`` (port 0: a free
    one, then in :attr:`port`), from a background thread until :meth:`close`.

    ``/healthz`` answers 200 ``ok`` while a supervisor runs the job with all its
    workers alive, otherwise 503 and the reason (see :func:`health`).
    """

    def __init__(
        self,
        coord_dir: str | os.PathLike[str],
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        job: str | None = None,
    ) -> None:
        require_prometheus_client()
        from prometheus_client import CollectorRegistry, make_wsgi_app

        self.coord_dir = Path(coord_dir)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(JobCollector(coord_dir, job))
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            if environ.get("PATH_INFO") == "/healthz":
                ok, reason = health(read_stats(self.coord_dir))
                status = "200 OK" if ok else "503 Service Unavailable"
                start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
                return [f"{reason}\n".encode()]
            return metrics_app(environ, start_response)

        try:
            self._server = make_server(
                host, port, app, server_class=_Server, handler_class=_QuietHandler
            )
        except OSError as e:
            raise ConfigError(f"--metrics-port {port}: can not listen on {host}:{port}: {e}") from e
        self.host = host
        self.port: int = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="rstreams-metrics", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
