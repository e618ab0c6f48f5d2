"""Live statistics of a running embedded job, published as JSON files.

The supervisor and every worker of an ``rstreams run`` write what they know, about once
a second, to ``<job dir>/coordination/<job>/stats/`` (see :func:`stats_dir`); readers
(``rstreams top``, the Prometheus exposition of ``rstreams run --metrics-port``) read
them with :func:`read_stats`, from any process, without talking to the job. Each file
is written whole to a temporary name and renamed over the old one, so a reader sees
either the previous or the next version, never half of one.

``worker-<member id>.json``, one per worker process (the member id of its consumer
group membership); counts are cumulative since that process started, so a restarted
worker starts a new file (under a new member id) from zero::

    {"version": 1, "member": str, "pid": int,
     "time": float,            # epoch seconds when written
     "started": float,         # epoch seconds when the worker started
     "generation": int,        # the group generation of the worker's last rebalance
     "processed": int,         # input records processed
     "tasks": {"<task id>": {
         "queues": {"<topic>[<q>]": {"position": int, "end": int, "lag": int}},
         "restoring": [done, total] or null,   # changelog offsets replayed / to replay
         "watermark": int or null}},           # event time (ms); null: none yet / none
     "steps": {"<step name>": {"in": int, "out": int}},   # records, over all its tasks
     "stores": {"<store>@<task id>": {"entries": int,        # estimate (RocksDB's)
                                      "bytes": int or null,  # on disk + memtables
                                      "restored": int}},     # changelog records replayed
     "commits": {"count": int, "seconds_sum": float,
                 "buckets": [[upper bound (s), cumulative count], ..., ["+Inf", count]]},
     "late": int, "skipped": int, "dead_lettered": int, "restored_records": int,
     "null_keys": int,         # records a join or aggregation matched not: key None
     "errors": [{"time": float, "message": str}, ...]}      # at most 5, newest last

A step's ``in`` counts the records handed to it and ``out`` those it passed on (a sink:
sent to its topic; a map-side combined shuffle sink sends fewer than it receives). The worker
deletes its file when it leaves the group cleanly; the supervisor deletes the files of
workers that died.

``supervisor.json``::

    {"version": 1, "pid": int, "time": float, "started": float, "job": str,
     "pipeline": str, "workers_wanted": int, "tree": [...] (the topology as data, see
     rstreams.planner.describe.tree_data: what ``rstreams top`` draws, loading no code),
     "workers": [{"slot": int, "pid": int, "alive": bool, "restarts": int}],
     "restarts": int, "records_in": int, "bytes_read": int, "bytes_total": int,
     "records_out": int, "lag": int, "generation": int,
     "state": "running" | "done" | "failed"}   # a SupervisorState's value

It stays after the run, with its final state.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rstreams.errors import StateStoreError
from rstreams.runtime.engine.operators.watermarks import END, NO_TIME
from rstreams.runtime.engine.tasks.lifecycle import SupervisorState
from rstreams.runtime.layout import GroupLayout, JobLayout
from rstreams.semantics.nullkeys import NULL_KEYS

if TYPE_CHECKING:
    from rstreams.runtime.engine.tasks.task import Task
    from rstreams.runtime.queues.broker import Broker
    from rstreams.state.metered import MeteredStore

#: Version of the files' layout; readers skip files of another version.
STATS_VERSION = 1
#: Seconds between two publications of a worker or the supervisor.
PUBLISH_INTERVAL = 1.0
#: Upper bounds (seconds) of the commit-duration histogram (Prometheus' defaults).
COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
#: Errors (warnings and worse logged by rstreams) a worker file keeps.
MAX_ERRORS = 5

#: The task metrics a worker adds up (``StreamContext.metrics``).
_COUNTS = ("late", "skipped", "dead_lettered", NULL_KEYS)


def coordination_dir(data_dir: str | os.PathLike[str], job_id: str) -> Path:
    """Where the workers of job ``job_id`` run under ``rstreams run --data-dir DIR``
    coordinate (membership, task locks, statistics).

    >>> coordination_dir("/data", "wordcount").as_posix()
    '/data/wordcount/coordination/wordcount'
    """
    return JobLayout.of(data_dir, job_id).coordination.dir


def stats_dir(coord_dir: str | os.PathLike[str]) -> Path:
    """The statistics files of a job whose coordination directory is ``coord_dir``."""
    return GroupLayout(coord_dir).stats


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    os.replace(tmp, path)


def pid_alive(pid: int) -> bool:
    """Is process ``pid`` running (on this machine)?"""
    if pid <= 0:
        return False  # (0 and negative numbers name process groups to os.kill)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    except (OverflowError, ValueError):
        return False
    return True


def _generation(coord_dir: Path) -> int:
    try:
        return int(GroupLayout(coord_dir).generation.read_text() or 0)
    except (OSError, ValueError):
        return 0


class CommitHistogram:
    """Durations of commits, in cumulative buckets (as Prometheus histograms keep them).

    >>> h = CommitHistogram()
    >>> h.observe(0.003); h.observe(0.2); h.observe(30.0)
    >>> d = h.to_json()
    >>> d["count"], round(d["seconds_sum"], 3), d["buckets"][0], d["buckets"][6], d["buckets"][-1]
    (3, 30.203, [0.005, 1], [0.25, 2], ['+Inf', 3])
    """

    def __init__(self, bounds: Iterable[float] = COMMIT_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)  # per bucket, not cumulative
        self.count = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.sum += seconds
        for i, bound in enumerate(self.bounds):
            if seconds <= bound:
                self.counts[i] += 1
                break

    def to_json(self) -> dict[str, Any]:
        buckets: list[list[Any]] = []
        cumulative = 0
        for bound, n in zip(self.bounds, self.counts):
            cumulative += n
            buckets.append([bound, cumulative])
        buckets.append(["+Inf", self.count])
        return {"count": self.count, "seconds_sum": self.sum, "buckets": buckets}


class _RecentErrors(logging.Handler):
    """The last warnings and errors rstreams logged in this process."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.recent: deque[dict[str, Any]] = deque(maxlen=MAX_ERRORS)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not break the worker
            message = str(record.msg)
        self.recent.append({"time": record.created, "message": message[:500]})


def _store_stats(store: MeteredStore) -> tuple[int, int | None, int]:
    """(entries, bytes or None, restored records) of a task's store: the metered
    store's own figures (RocksDB's estimates: property reads, no scan)."""
    try:
        m = store.metrics()
    except StateStoreError:  # damaged: the task's own error will say so
        return 0, None, 0
    return m.entries, m.bytes, m.restored


def _task_counts(task: Task) -> tuple[dict[str, tuple[int, int]], dict[str, int], int]:
    """A task's (per step: (in, out)), (late, skipped, dead_lettered, null_keys) and
    restored records."""
    steps = {p.name: (p.records_in, p.records_out) for p in getattr(task, "processors", ())}
    ctx = getattr(task, "ctx", None)
    metrics = ctx.metrics if ctx is not None else {}
    counts = {k: int(metrics.get(k, 0)) for k in _COUNTS}
    return steps, counts, int(getattr(task, "restored", 0))


def _task_doc(task: Task, ends: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    """A running task's entry of ``tasks``: its queues' positions and lags, its
    watermark (``ends``: the end offset of every input queue)."""
    queues = {}
    for topic, pos in task.positions.items():
        end = ends[(topic, task.queue)]
        queues[f"{topic}[{task.queue}]"] = {"position": pos, "end": end, "lag": max(0, end - pos)}
    wm = task.ctx.watermark
    return {
        "queues": queues,
        "restoring": None,
        "watermark": None if wm in (NO_TIME, END) else wm,
    }


def _store_docs(task: Task, tid: str) -> dict[str, Any]:
    """A task's entries of ``stores``, one per store, named ``<store>@<task id>``."""
    docs = {}
    for name, store in task.stores.items():
        entries, size, restored = _store_stats(store)
        docs[f"{name}@{tid}"] = {"entries": entries, "bytes": size, "restored": restored}
    return docs


class StatsPublisher:
    """What one worker publishes in ``worker-<member>.json`` (see the module docs).

    The worker calls :meth:`publish` from its loop (it writes at most once per
    ``interval``), :meth:`commit_took` after each commit, :meth:`restore_progress`
    while a task restores (when the loop does not run) and :meth:`close` when it leaves.
    Counting itself is done where the work is, a batch at a time: processors count
    their records (``records_in``/``records_out``), tasks their late, skipped and
    dead-lettered records and those with a None key; the publisher only adds them up.
    Counts of tasks the worker gave up are kept, so every count only grows.
    """

    def __init__(
        self,
        coord_dir: str | os.PathLike[str],
        member_id: str,
        *,
        interval: float = PUBLISH_INTERVAL,
        capture_errors: bool = True,
    ) -> None:
        self.path = GroupLayout(coord_dir).worker_stats(member_id)
        self.member_id = member_id
        self.interval = interval
        self.started = time.time()
        self.commits = CommitHistogram()
        self.restoring: dict[str, tuple[int, int]] = {}
        #: The tasks seen at the last publication; one no longer running is folded into
        #: the totals below (held until then so that nothing it counted is lost).
        self._seen: dict[Any, Task] = {}  # by the worker's task key
        self._gone_steps: dict[str, list[int]] = {}
        self._gone_counts = dict.fromkeys((*_COUNTS, "restored"), 0)
        self._next = 0.0
        self._doc: dict[str, Any] | None = None
        self._capture_errors = capture_errors
        self._errors: _RecentErrors | None = None

    def due(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self._next

    def commit_took(self, seconds: float) -> None:
        self.commits.observe(seconds)

    def restore_progress(self, task_id: str, done: int, total: int) -> None:
        """A task being built replays its changelogs: publish its progress (the loop
        that publishes the rest waits for the restore to end)."""
        if done >= total:
            self.restoring.pop(task_id, None)
        else:
            self.restoring[task_id] = (done, total)
        if self._doc is not None and self.due():
            self._doc["time"] = time.time()
            self._doc["tasks"].update(self._restoring_tasks(self._doc["tasks"]))
            self._write(self._doc)

    def _restoring_tasks(self, running: Mapping[str, Any]) -> dict[str, Any]:
        return {
            tid: {"queues": {}, "restoring": list(progress), "watermark": None}
            for tid, progress in self.restoring.items()
            if tid not in running
        }

    def _fold_gone(self, tasks: Mapping[Any, Task]) -> None:
        for tid, task in list(self._seen.items()):
            if tasks.get(tid) is task:
                continue
            steps, counts, restored = _task_counts(task)
            for name, (n_in, n_out) in steps.items():
                acc = self._gone_steps.setdefault(name, [0, 0])
                acc[0] += n_in
                acc[1] += n_out
            for k, v in counts.items():
                self._gone_counts[k] += v
            self._gone_counts["restored"] += restored
            del self._seen[tid]
        self._seen.update(tasks)

    def snapshot(
        self, tasks: Mapping[Any, Task], broker: Broker, *, processed: int, generation: int
    ) -> dict[str, Any]:
        """The document :meth:`publish` writes."""
        self._fold_gone(tasks)
        steps = {name: list(v) for name, v in self._gone_steps.items()}
        totals = dict(self._gone_counts)
        task_docs: dict[str, Any] = {}
        stores: dict[str, Any] = {}
        inputs = [(topic, task.queue) for task in tasks.values() for topic in task.positions]
        ends = dict(zip(inputs, broker.end_offsets(inputs), strict=True))  # one call
        for key, task in tasks.items():
            tid = str(key)  # a TaskId's text, '<sub-topology>_<queue>'
            t_steps, counts, restored = _task_counts(task)
            for name, (n_in, n_out) in t_steps.items():
                acc = steps.setdefault(name, [0, 0])
                acc[0] += n_in
                acc[1] += n_out
            for k, v in counts.items():
                totals[k] += v
            totals["restored"] += restored
            task_docs[tid] = _task_doc(task, ends)
            stores.update(_store_docs(task, tid))
        task_docs.update(self._restoring_tasks(task_docs))
        return {
            "version": STATS_VERSION,
            "member": self.member_id,
            "pid": os.getpid(),
            "time": time.time(),
            "started": self.started,
            "generation": generation,
            "processed": processed,
            "tasks": task_docs,
            "steps": {name: {"in": v[0], "out": v[1]} for name, v in sorted(steps.items())},
            "stores": stores,
            "commits": self.commits.to_json(),
            "late": totals["late"],
            "skipped": totals["skipped"],
            "dead_lettered": totals["dead_lettered"],
            "restored_records": totals["restored"],
            NULL_KEYS: totals[NULL_KEYS],
            "errors": list(self._errors.recent) if self._errors is not None else [],
        }

    def publish(
        self,
        tasks: Mapping[Any, Task],
        broker: Broker,
        *,
        processed: int,
        generation: int,
        force: bool = False,
    ) -> bool:
        """Write the worker's file if ``interval`` has passed since the last time (or
        ``force``); True if it did."""
        now = time.monotonic()
        if not force and now < self._next:
            return False
        self._next = now + self.interval
        if self._capture_errors and self._errors is None:
            # From the first publication (a worker that never runs adds no handler)
            # until close().
            self._errors = _RecentErrors()
            logging.getLogger("rstreams").addHandler(self._errors)
        doc = self.snapshot(tasks, broker, processed=processed, generation=generation)
        self._doc = doc
        self._write(doc)
        return True

    def _write(self, doc: dict[str, Any]) -> None:
        # Statistics must never stop a worker: a full disk only leaves the file stale.
        with contextlib.suppress(OSError):
            _write_json(self.path, doc)

    def close(self) -> None:
        """The worker left the group: its file goes."""
        if self._errors is not None:
            logging.getLogger("rstreams").removeHandler(self._errors)
            self._errors = None
        self._capture_errors = False
        self._seen.clear()
        self.path.unlink(missing_ok=True)


class SupervisorStats:
    """What the supervisor of a run publishes in ``supervisor.json``; it also deletes
    the files of workers that died (see the module docs)."""

    def __init__(
        self,
        coord_dir: str | os.PathLike[str],
        *,
        job: str,
        pipeline: str,
        workers_wanted: int,
        interval: float = PUBLISH_INTERVAL,
        tree: list[dict[str, Any]] | None = None,
    ) -> None:
        self.coord_dir = Path(coord_dir)
        self.layout = GroupLayout(coord_dir)
        self.dir = self.layout.stats
        self.path = self.layout.supervisor_stats
        self.job = job
        self.pipeline = pipeline
        #: The topology as plain data (rstreams top draws it without loading code).
        self.tree = tree
        self.workers_wanted = workers_wanted
        self.interval = interval
        self.started = time.time()
        self.restarts: dict[int, int] = {}  # per slot
        self._status: Mapping[str, Any] = {}
        self._next = 0.0

    def clear(self) -> None:
        """Forget the files of an earlier run (a new run's workers have new ids)."""
        if self.dir.is_dir():
            for f in self.dir.iterdir():
                f.unlink(missing_ok=True)

    def spawned(self, slot: int) -> None:
        """A worker process was started in ``slot``: a restart if one ran there before."""
        if slot in self.restarts:
            self.restarts[slot] += 1
        else:
            self.restarts[slot] = 0

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def publish(
        self,
        status: Mapping[str, Any] | None,
        workers: Mapping[int, int | None],
        state: SupervisorState = SupervisorState.RUNNING,
    ) -> None:
        """Write ``supervisor.json``. ``status``: the supervisor's counts (records_in,
        bytes_read, bytes_total, records_out, lag), None for those published last;
        ``workers``: slot -> pid of the process running there, None if none runs now."""
        self._next = time.monotonic() + self.interval
        if status is None:
            status = self._status
        self._status = status
        rows = []
        for slot in sorted(set(workers) | set(self.restarts)):
            pid = workers.get(slot)
            rows.append(
                {
                    "slot": slot,
                    "pid": pid or 0,
                    "alive": pid is not None and pid_alive(pid),
                    "restarts": self.restarts.get(slot, 0),
                }
            )
        doc = {
            "version": STATS_VERSION,
            "pid": os.getpid(),
            "time": time.time(),
            "started": self.started,
            "job": self.job,
            "pipeline": self.pipeline,
            "tree": self.tree,
            "workers_wanted": self.workers_wanted,
            "workers": rows,
            "restarts": sum(self.restarts.values()),
            **{
                k: int(status.get(k) or 0)
                for k in ("records_in", "bytes_read", "bytes_total", "records_out", "lag")
            },
            "generation": _generation(self.coord_dir),
            "state": SupervisorState(state).value,  # (the file's format: the plain string)
        }
        with contextlib.suppress(OSError):
            _write_json(self.path, doc)
            self._prune_dead_workers()

    def _prune_dead_workers(self) -> None:
        for path in self.layout.worker_stats_files():
            doc = _load(path)
            if doc is not None and not pid_alive(int(doc.get("pid", 0))):
                path.unlink(missing_ok=True)


# -- reading ---------------------------------------------------------------------------------


@attrs.frozen
class JobStats:
    """What a job's processes last published (see the module docs for the fields).

    ``supervisor`` is None when no supervisor published (or it died while running);
    ``workers`` holds the files of live workers, sorted by member id.
    """

    supervisor: dict[str, Any] | None
    workers: list[dict[str, Any]]
    #: Epoch seconds when this snapshot was read.
    read_at: float

    @property
    def running(self) -> bool:
        """A supervisor is running the job now."""
        sup = self.supervisor
        return sup is not None and sup.get("state") == SupervisorState.RUNNING


def _load(path: Path) -> dict[str, Any] | None:
    """A stats file, or None if it is gone, half-written or of another version."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != STATS_VERSION:
        return None
    if not isinstance(doc.get("pid"), int):
        return None
    return doc


def read_stats(coord_dir: str | os.PathLike[str]) -> JobStats:
    """Read the statistics a job's processes publish under ``coord_dir`` (see
    :func:`coordination_dir`). Skips files that can not be read whole and those of
    processes that are gone (a finished supervisor's file stays: its state says how
    the run ended).

    >>> import tempfile
    >>> coord = tempfile.mkdtemp()
    >>> read_stats(coord)
    JobStats(supervisor=None, workers=[], read_at=...)
    >>> sup = SupervisorStats(coord, job="wc", pipeline="wc.py", workers_wanted=1)
    >>> sup.publish({"records_in": 10}, {0: os.getpid()})
    >>> s = read_stats(coord)
    >>> s.running, s.supervisor["records_in"], s.supervisor["workers"][0]["alive"]
    (True, 10, True)
    """
    layout = GroupLayout(coord_dir)
    supervisor = _load(layout.supervisor_stats)
    if (
        supervisor is not None
        and supervisor.get("state") == SupervisorState.RUNNING
        and not pid_alive(supervisor["pid"])
    ):
        supervisor = None  # it died without saying so
    workers = []
    for path in layout.worker_stats_files():
        doc = _load(path)
        if doc is not None and pid_alive(doc["pid"]):
            workers.append(doc)
    return JobStats(supervisor, workers, time.time())
