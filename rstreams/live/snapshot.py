"""Gathering what a running job leaves under its data directory into a
:class:`LiveSnapshot` (plain data, drawn by :mod:`rstreams.live.render`)."""

from __future__ import annotations

import os
import re
import time
from typing import Any

import attrs

from rstreams.brokeropts import JobAccess
from rstreams.errors import ConfigError, RStreamsError
from rstreams.runtime.engine.stats import pid_alive, read_stats
from rstreams.runtime.layout import JobLayout

__all__ = [
    "LiveSnapshot",
    "QueueRow",
    "StepNode",
    "SubTopologyNode",
    "list_jobs",
    "load_pipeline",
    "pick_job",
    "snapshot",
]

_QUEUE = re.compile(r"(.+)\[(\d+)\]")


@attrs.frozen
class QueueRow:
    """One input queue of the job: committed offset, log end, lag, and who works on it."""

    topic: str
    queue: int
    committed: int
    end: int
    lag: int
    owner: str | None = None
    #: How far its owner has processed (may be past ``committed``), if it says.
    position: int | None = None


@attrs.frozen
class StepNode:
    """A step of the topology tree: processor name, kind, topic (sources and sinks)."""

    name: str
    kind: str
    topic: str | None = None
    children: tuple[StepNode, ...] = ()
    #: Drawn already under another parent (a merge or a join): not expanded again.
    repeated: bool = False


@attrs.frozen
class SubTopologyNode:
    """A sub-topology of the tree: the topics it reads and writes, its source steps."""

    id: int
    sources: tuple[StepNode, ...]
    source_topics: tuple[str, ...]
    sink_topics: tuple[str, ...]


@attrs.frozen(eq=False)
class LiveSnapshot:
    """What is known about a job at one moment (``time``, epoch seconds).

    ``supervisor`` and ``workers`` are the statistics files as published (see
    docs/operations.md); ``members`` maps each live group member to its pid and
    heartbeat age; ``queues`` the lag of each input queue; ``topology`` the tree of
    sub-topologies, or None when the pipeline could not be loaded (``note`` says why).
    """

    job: str
    data_dir: str
    time: float
    supervisor: dict[str, Any] | None = None
    workers: tuple[dict[str, Any], ...] = ()
    members: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    generation: int = 0
    owners: dict[str, str] = attrs.field(factory=dict)
    queues: tuple[QueueRow, ...] = ()
    restoring: tuple[int, int] | None = None
    topology: tuple[SubTopologyNode, ...] | None = None
    note: str | None = None

    @property
    def running(self) -> bool:
        """Is the job's supervisor still at work (as far as its statistics tell)?"""
        sup = self.supervisor
        return sup is not None and sup.get("state") == "running" and _alive(sup.get("pid"))


# -- gathering ----------------------------------------------------------------------------


def list_jobs(data_dir: str | os.PathLike[str]) -> list[str]:
    """The jobs that have a log under ``data_dir``, sorted."""
    return JobLayout.jobs(data_dir)


def pick_job(data_dir: str, job: str | None) -> str:
    """``job`` if it exists under ``data_dir``, else the only job there.

    Raises RStreamsError when there is no such job (exit 1) and ConfigError when
    ``job`` was left out and there are several (exit 2: usage)."""
    jobs = list_jobs(data_dir)
    if job is not None:
        if job not in jobs:
            known = f"; jobs there: {', '.join(jobs)}" if jobs else ""
            raise RStreamsError(f"no job {job!r} in {data_dir!r} (no {job}/log){known}")
        return job
    if len(jobs) == 1:
        return jobs[0]
    if not jobs:
        raise RStreamsError(
            f"no job has run in {data_dir!r}; start one with `rstreams run` or give --data-dir"
        )
    raise ConfigError(
        f"{data_dir!r} holds several jobs: {', '.join(jobs)}; name one: rstreams top JOB"
    )


def _alive(pid: Any) -> bool:
    return isinstance(pid, int) and pid > 0 and pid_alive(pid)


def _tree(topology: Any) -> tuple[SubTopologyNode, ...]:
    subs = []
    for sub in topology.subtopologies:
        by_name = {f.name: f for f in sub.factories}
        seen: set[str] = set()

        def node(name: str, by_name: dict[str, Any] = by_name, seen: set[str] = seen) -> StepNode:
            f = by_name[name]
            if name in seen:
                return StepNode(f.name, f.label, f.topic, repeated=True)
            seen.add(name)
            kids = tuple(node(c) for c in f.children if c in by_name)
            return StepNode(f.name, f.label, f.topic, kids)

        roots = tuple(node(f.name) for f in sub.factories if not f.parents)
        subs.append(
            SubTopologyNode(sub.id, roots, tuple(sub.source_topics), tuple(sub.sink_topics))
        )
    return tuple(subs)


def load_pipeline(supervisor: dict[str, Any] | None) -> tuple[Any, str | None]:
    """The job's topology from the pipeline file its supervisor names: (topology, None),
    or (None, why not). A relative path is looked up from the supervisor's directory too."""
    from rstreams.loader import load_topology

    path, pid = (supervisor or {}).get("pipeline"), (supervisor or {}).get("pid")
    if not path:
        return None, "no topology: the job's supervisor has published no pipeline path"
    candidates = [str(path)]
    if not os.path.isabs(path) and _alive(pid):
        # (Linux) where the supervisor was started, if not from here
        candidates.append(os.path.join(f"/proc/{pid}/cwd", path))
    why = ""
    for candidate in candidates:
        if not os.path.isfile(candidate):
            why = f"{path} not found"
            continue
        try:
            return load_topology(candidate), None
        except RStreamsError as e:
            why = str(e)
            break
    return None, f"no topology ({why})"


def snapshot(
    data_dir: str | os.PathLike[str],
    job: str,
    *,
    topology: Any = None,
    access: JobAccess | None = None,
) -> LiveSnapshot:
    """Everything the job publishes under ``data_dir``, now. Loads the job's pipeline for
    the topology tree unless ``topology`` is given (a Topology, or False for no tree).

    ``access``: where the job's topics and group are (a Redis broker); by default its file
    log under ``data_dir``. Statistics are read from ``data_dir`` either way: on Redis,
    those of the workers of this host (if it runs any)."""
    from rstreams.admin import lag_rows
    from rstreams.runtime.engine.taskid import TaskId
    from rstreams.runtime.engine.worker import restore_progress

    layout = JobLayout.of(data_dir, job)
    if access is None:
        access = JobAccess(str(data_dir), job)
        if not layout.log.is_dir():
            raise RStreamsError(f"no job {job!r} in {str(data_dir)!r} (no {layout.log})")
    coord = layout.coordination.dir
    taken = time.time()
    stats = read_stats(coord)
    supervisor, workers = stats.supervisor, stats.workers
    note = None
    if topology is None:
        topology, note = load_pipeline(supervisor)
    elif topology is False:
        topology = None
    members: dict[str, dict[str, Any]] = {}
    owners: dict[str, str] = {}
    generation = 0
    group = access.membership(job, "rstreams-top")  # (None: no group directory yet)
    if group is not None:
        members = {m: dict(info) for m, info in group.describe().items()}
        owners = group.task_owners()
        generation = group.generation()
    # Who works on each queue and how far: what workers say, else the task locks.
    owner_of: dict[tuple[str, int], str] = {}
    position: dict[tuple[str, int], int] = {}
    for w in workers:
        for task in (w.get("tasks") or {}).values():
            for name, q in (task.get("queues") or {}).items():
                match = _QUEUE.fullmatch(str(name))  # "<topic>[<queue>]"
                if match:
                    key = (match[1], int(match[2]))
                    owner_of[key] = w["member"]
                    if isinstance(q.get("position"), int):
                        position[key] = q["position"]
    broker = access.open_broker()
    try:
        offsets = broker.group_offsets(job)
        if topology is not None:
            for sub in topology.subtopologies:
                for topic in sub.source_topics:
                    for q in range(broker.queue_count(topic) or 0):
                        offsets.setdefault((topic, q), broker.committed(job, topic, q))
                        owner = owners.get(str(TaskId(sub.id, q)))
                        if owner is not None:
                            owner_of.setdefault((topic, q), owner)
        rows = tuple(
            QueueRow(t, q, c, e, lag, owner_of.get((t, q)), position.get((t, q)))
            for t, q, c, e, lag in lag_rows(broker, offsets)
        )
    finally:
        broker.close()
    return LiveSnapshot(
        job=job,
        data_dir=str(data_dir),
        time=taken,
        supervisor=supervisor,
        workers=tuple(sorted(workers, key=lambda w: str(w.get("member")))),
        members=members,
        generation=generation,
        owners=owners,
        queues=rows,
        restoring=restore_progress(coord),
        topology=_tree(topology) if topology is not None else None,
        note=note,
    )
