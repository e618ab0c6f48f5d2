"""Gathering what a running job leaves under its data directory into a
:class:`LiveSnapshot` (plain data, drawn by :mod:`rstreams.live.render`)."""

from __future__ import annotations

import os
import re
import time
from typing import Any

import attrs

from rstreams.brokeropts import JobAccess
from rstreams.errors import ConfigError
from rstreams.runtime.engine.coordination.stats import pid_alive, read_stats
from rstreams.runtime.engine.tasks.lifecycle import SupervisorState
from rstreams.runtime.layout import JobLayout

__all__ = [
    "LiveSnapshot",
    "QueueRow",
    "StepNode",
    "SubTopologyNode",
    "list_jobs",
    "pick_job",
    "published_tree",
    "snapshot",
    "tree_from_data",
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
        if sup is None or sup.get("state") != SupervisorState.RUNNING:
            return False
        return _alive(sup.get("pid"))


# -- gathering ----------------------------------------------------------------------------


def list_jobs(data_dir: str | os.PathLike[str]) -> list[str]:
    """The jobs that have a log under ``data_dir``, sorted."""
    return JobLayout.jobs(data_dir)


def pick_job(data_dir: str, job: str | None) -> str:
    """``job`` if it exists under ``data_dir``, else the only job there.

    Raises ConfigError (exit 2: usage, as the admin commands' ``--job``) when there is
    no such job, or when ``job`` was left out and there are several."""
    jobs = list_jobs(data_dir)
    if job is not None:
        if job not in jobs:
            known = (
                f"; jobs there: {', '.join(jobs)}"
                if jobs
                else "; no job has run there: start it with `rstreams run`, or give the "
                "--data-dir it runs in"
            )
            raise ConfigError(f"no job {job!r} in {data_dir!r} (no {job}/log){known}")
        return job
    if len(jobs) == 1:
        return jobs[0]
    if not jobs:
        raise ConfigError(
            f"no job has run in {data_dir!r}; start one with `rstreams run` or give --data-dir"
        )
    raise ConfigError(
        f"{data_dir!r} holds several jobs: {', '.join(jobs)}; name one: rstreams top JOB"
    )


def _alive(pid: Any) -> bool:
    return isinstance(pid, int) and pid > 0 and pid_alive(pid)


def _tree(topology: Any) -> tuple[SubTopologyNode, ...]:
    """The tree of a Topology (one the user named, or the run's own)."""
    from rstreams.planner.describe import tree_data

    return tree_from_data(tree_data(topology)) or ()


def tree_from_data(data: Any) -> tuple[SubTopologyNode, ...] | None:
    """The tree a supervisor published (``supervisor.json``'s ``"tree"``), checked
    field by field: data, never code; None if it is missing or not such a tree."""
    if not isinstance(data, list):
        return None

    def text(value: Any) -> str | None:
        if value is not None and not isinstance(value, str):
            raise TypeError(value)
        return value

    def step(doc: Any, depth: int = 0) -> StepNode:
        if not isinstance(doc, dict) or depth > 200:
            raise TypeError(doc)
        kids = doc.get("children") or []
        if not isinstance(kids, list):
            raise TypeError(kids)
        return StepNode(
            str(text(doc.get("name"))),
            str(text(doc.get("kind"))),
            text(doc.get("topic")),
            tuple(step(k, depth + 1) for k in kids),
            bool(doc.get("repeated")),
        )

    try:
        return tuple(
            SubTopologyNode(
                int(sub["id"]),
                tuple(step(r) for r in sub["roots"]),
                tuple(str(text(t)) for t in sub["sources"]),
                tuple(str(text(t)) for t in sub["sinks"]),
            )
            for sub in data
        )
    except (KeyError, TypeError, ValueError):
        return None


def published_tree(supervisor: dict[str, Any] | None) -> tuple[Any, str | None]:
    """The topology tree the job's supervisor published as data: (tree, None), or (None,
    why not). The live view never imports the pipeline file the statistics name: they
    are files anyone who can write the data directory controls, and loading a pipeline
    runs its code (name the pipeline on the command line instead: ``--pipeline``)."""
    tree = tree_from_data((supervisor or {}).get("tree"))
    if tree is not None:
        return tree, None
    if not supervisor:
        return None, "no topology: the job's supervisor has published no statistics yet"
    return None, (
        "no topology: the job's statistics hold no tree (a run of an earlier rstreams); "
        "name its pipeline: rstreams top --pipeline PIPELINE.py"
    )


def snapshot(
    data_dir: str | os.PathLike[str],
    job: str,
    *,
    topology: Any = None,
    access: JobAccess | None = None,
) -> LiveSnapshot:
    """Everything the job publishes under ``data_dir``, now. The topology tree is the one
    the job's supervisor published as data unless ``topology`` is given (a Topology the
    caller loaded from a file the user named, a tree, or False for no tree); no code is
    ever loaded from what the data directory names.

    ``access``: where the job's topics and group are (a Redis broker); by default its file
    log under ``data_dir``. Statistics are read from ``data_dir`` either way: on Redis,
    those of the workers of this host (if it runs any)."""
    from rstreams.runtime.engine.coordination.worker import restore_progress

    layout = JobLayout.of(data_dir, job)
    if access is None:
        access = JobAccess(str(data_dir), job)
        if not layout.log.is_dir():
            raise ConfigError(f"no job {job!r} in {str(data_dir)!r} (no {layout.log})")
    coord = layout.coordination.dir
    taken = time.time()
    stats = read_stats(coord)
    supervisor, workers = stats.supervisor, stats.workers
    tree, note = _topology_tree(topology, supervisor)
    members: dict[str, dict[str, Any]] = {}
    owners: dict[str, str] = {}
    generation = 0
    group = access.membership(job, "rstreams-top")  # (None: no group directory yet)
    if group is not None:
        members = {m: dict(info) for m, info in group.describe().items()}
        owners = group.task_owners()
        generation = group.generation()
    return LiveSnapshot(
        job=job,
        data_dir=str(data_dir),
        time=taken,
        supervisor=supervisor,
        workers=tuple(sorted(workers, key=lambda w: str(w.get("member")))),
        members=members,
        generation=generation,
        owners=owners,
        queues=_queue_rows(access, job, tree, owners, workers),
        restoring=restore_progress(coord),
        topology=tree,
        note=note,
    )


def _topology_tree(
    topology: Any, supervisor: dict[str, Any] | None
) -> tuple[tuple[SubTopologyNode, ...] | None, str | None]:
    """The tree to draw and a note on it: the published one unless the caller gave one
    (a Topology, a tree, or False for none)."""
    note = None
    if topology is None:
        topology, note = published_tree(supervisor)
    elif topology is False:
        topology = None
    if topology is None:
        return None, note
    return (topology if isinstance(topology, tuple) else _tree(topology)), note


def _queue_rows(
    access: JobAccess,
    job: str,
    tree: tuple[SubTopologyNode, ...] | None,
    owners: dict[str, str],
    workers: list[dict[str, Any]],
) -> tuple[QueueRow, ...]:
    """Every input queue's offsets and lag from the broker, with who works on it and how
    far: what workers say, else the task locks (``owners``)."""
    from rstreams.admin import lag_rows
    from rstreams.runtime.engine.tasks.taskid import TaskId

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
        for sub in tree or ():
            for topic in sub.source_topics:
                for q in range(broker.queue_count(topic) or 0):
                    offsets.setdefault((topic, q), broker.committed(job, topic, q))
                    owner = owners.get(str(TaskId(sub.id, q)))
                    if owner is not None:
                        owner_of.setdefault((topic, q), owner)
        return tuple(
            QueueRow(t, q, c, e, lag, owner_of.get((t, q)), position.get((t, q)))
            for t, q, c, e, lag in lag_rows(broker, offsets)
        )
    finally:
        broker.close()
