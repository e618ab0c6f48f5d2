"""The live view of a running job: ``rstreams top`` and ``rstreams run --live``.

It reads only what a running job already leaves under its data directory, so it works
from another terminal (or machine sharing the directory) while the job runs:

- the statistics the supervisor and each worker publish about once a second under
  ``<data-dir>/<job>/coordination/<job>/stats/`` (records in and out, per step counts,
  per queue positions, state stores, commit latencies, late and skipped records, errors);
- the consumer group's files: members, generation and which member holds which task;
- the restore progress files of tasks rebuilding their state;
- committed offsets and log ends, read through the broker (the lag of each queue);
- the pipeline file the supervisor names, loaded to draw the topology as a tree (the view
  goes on without the tree when it can not be loaded).

:func:`snapshot` gathers all that into a :class:`LiveSnapshot` (plain data);
:func:`render` turns a snapshot (and the one before it, for records per second) into a
``rich`` renderable; :func:`plain_line` into one line of text for logs;
:func:`run_top` refreshes either on a terminal until Ctrl-C.

>>> import io, tempfile
>>> from rich.console import Console
>>> data = tempfile.mkdtemp()
>>> JobLayout.of(data, "wordcount").log.mkdir(parents=True)
>>> snap = snapshot(data, "wordcount")
>>> snap.job, snap.supervisor, snap.workers
('wordcount', None, ())
>>> plain_line(snap, None)
'wordcount: no statistics yet (is the job running?); generation 0, 0 members'
>>> console = Console(file=io.StringIO(), width=100, color_system=None)
>>> console.print(render(snap, None))
>>> "job wordcount" in console.file.getvalue()
True
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs
from rich import box
from rich.console import Console, Group, RenderableType
from rich.filesize import decimal
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from rstreams.errors import ConfigError, RStreamsError
from rstreams.runtime.engine.stats import pid_alive, read_stats
from rstreams.runtime.layout import JobLayout

__all__ = [
    "LiveRunView",
    "LiveSnapshot",
    "QueueRow",
    "RunProgress",
    "StepNode",
    "SubTopologyNode",
    "list_jobs",
    "pick_job",
    "plain_line",
    "progress_text",
    "render",
    "run_top",
    "snapshot",
]


def _table(title: str, *columns: str) -> Table:
    """A table without edges (as many rows as possible fit a terminal), its title on the
    left; ``"name:<"`` is a column of text, ``"name"`` one of numbers (right-aligned)."""
    table = Table(
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True, title=title,
        title_justify="left", title_style="bold",
    )  # fmt: skip
    for column in columns:
        name, _, align = column.partition(":")
        # (a row per line: a cell too wide for the terminal is cut, not wrapped)
        table.add_column(name, justify="left" if align == "<" else "right", no_wrap=True)
    return table


#: Queue rows shown; the rest are summed in one row (the ones with most lag are shown).
MAX_QUEUES = 12
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


def snapshot(data_dir: str | os.PathLike[str], job: str, *, topology: Any = None) -> LiveSnapshot:
    """Everything the job publishes under ``data_dir``, now. Loads the job's pipeline for
    the topology tree unless ``topology`` is given (a Topology, or False for no tree)."""
    from rstreams.admin import lag_rows
    from rstreams.runtime.engine.taskid import TaskId
    from rstreams.runtime.engine.worker import open_broker, restore_progress
    from rstreams.runtime.rebalance.membership import FileGroupMembership

    layout = JobLayout.of(data_dir, job)
    root = layout.root
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
    if coord.is_dir():  # (looking would create the group's directory)
        group = FileGroupMembership(root, job, "rstreams-top")
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
    broker = open_broker(root)
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


# -- rates --------------------------------------------------------------------------------


def _rate(now: float, before: float, t_now: float, t_before: float) -> float | None:
    return (now - before) / (t_now - t_before) if t_now > t_before else None


def _worker_rate(
    w: dict[str, Any], previous: LiveSnapshot | None, value: Callable[[dict[str, Any]], float]
) -> float | None:
    """Per second of ``value(stats)`` for worker ``w`` since the previous snapshot."""
    if previous is None:
        return None
    for p in previous.workers:
        if p.get("member") == w.get("member"):
            return _rate(value(w), value(p), float(w["time"]), float(p["time"]))
    if float(w.get("started", 0)) >= previous.time:  # started since: counts from zero
        return _rate(value(w), 0, float(w["time"]), float(w["started"]))
    return None


def _sum_rates(rates: Iterable[float | None]) -> float | None:
    known = [r for r in rates if r is not None]
    return sum(known) if known else None


def _step_counts(workers: Iterable[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for w in workers:
        for name, c in (w.get("steps") or {}).items():
            a, b = out.get(name, (0, 0))
            out[name] = (a + int(c.get("in", 0)), b + int(c.get("out", 0)))
    return out


def _step_in(name: str) -> Callable[[dict[str, Any]], float]:
    def records_in(stats: dict[str, Any]) -> float:
        return float((stats.get("steps") or {}).get(name, {}).get("in", 0))

    return records_in


def _step_rates(snap: LiveSnapshot, previous: LiveSnapshot | None) -> dict[str, float | None]:
    """Records per second into each step, over all workers."""
    return {
        name: _sum_rates(_worker_rate(w, previous, _step_in(name)) for w in snap.workers)
        for name in _step_counts(snap.workers)
    }


def _records_rates(
    snap: LiveSnapshot, previous: LiveSnapshot | None
) -> tuple[float | None, float | None]:
    """Records in and out per second: the supervisor's counts, else what workers did."""
    sup, before = snap.supervisor, previous.supervisor if previous else None
    if sup is not None and before is not None and before.get("started") == sup.get("started"):
        t, t0 = float(sup["time"]), float(before["time"])
        return (
            _rate(sup.get("records_in", 0), before.get("records_in", 0), t, t0),
            _rate(sup.get("records_out", 0), before.get("records_out", 0), t, t0),
        )
    processed = _sum_rates(
        _worker_rate(w, previous, lambda s: float(s.get("processed", 0))) for w in snap.workers
    )
    return processed, None


# -- text pieces --------------------------------------------------------------------------


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"


def _per_s(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}/s"


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _quantile(commits: dict[str, Any], q: float) -> float | None:
    """The upper bound of the histogram bucket holding the ``q`` quantile."""
    count = commits.get("count") or 0
    if not count:
        return None
    for bound, cumulative in commits.get("buckets") or []:
        if cumulative >= q * count:
            return float("inf") if bound == "+Inf" else float(bound)
    return None


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def _commit_text(commits: dict[str, Any] | None) -> str:
    """Mean commit time and the 99th percentile's bucket: ``20 ms (p99 ≤100 ms)``."""
    if not commits or not commits.get("count"):
        return "-"
    avg = float(commits.get("seconds_sum", 0)) / commits["count"]
    p99 = _quantile(commits, 0.99)
    if p99 == float("inf"):  # beyond the last bucket: say which
        finite = [float(b) for b, _ in commits.get("buckets") or [] if b != "+Inf"]
        return f"{_ms(avg)} (p99 >{_ms(max(finite, default=0.0))})"
    return f"{_ms(avg)} (p99 ≤{_ms(p99)})"


def _pct(done: int, total: int) -> str:
    return f"{100 * done / total:.0f}% ({done:,}/{total:,})" if total else "-"


def _state(snap: LiveSnapshot) -> str:
    sup = snap.supervisor
    if sup is None:
        return "no statistics yet" if not snap.workers else "running"
    state = str(sup.get("state", "?"))
    if state == "running" and not _alive(sup.get("pid")):
        return "stopped (its supervisor is gone)"
    return state


def _restoring(workers: Iterable[dict[str, Any]]) -> tuple[int, int] | None:
    """(offsets replayed, to replay) over the tasks the workers say are restoring."""
    done = total = 0
    for w in workers:
        for task in (w.get("tasks") or {}).values():
            if task.get("restoring"):
                done += int(task["restoring"][0])
                total += int(task["restoring"][1])
    return (done, total) if total else None


def _totals(snap: LiveSnapshot, key: str) -> int:
    return sum(int(w.get(key, 0) or 0) for w in snap.workers)


def plain_line(snap: LiveSnapshot, previous: LiveSnapshot | None) -> str:
    """One line for logs and pipes: state, records in and out (per second when there is a
    previous snapshot), lag, workers, generation.

    >>> s = LiveSnapshot("wc", ".", 10.0, supervisor={"state": "done", "pid": 0,
    ...     "records_in": 1000, "records_out": 10, "lag": 0, "workers_wanted": 2,
    ...     "workers": [], "time": 10.0, "started": 1.0})
    >>> plain_line(s, None)
    'wc done: 1,000 records in, 10 out, lag 0, workers 0/2, generation 0'
    """
    sup = snap.supervisor
    if sup is None and not snap.workers:
        members = f" ({', '.join(snap.members)})" if snap.members else ""
        lags = f"lag {sum(r.lag for r in snap.queues):,}, " if snap.queues else ""
        return (
            f"{snap.job}: no statistics yet (is the job running?); {lags}generation "
            f"{snap.generation}, {len(snap.members)} members{members}"
        )
    rate_in, rate_out = _records_rates(snap, previous)
    lag = sup.get("lag") if sup is not None else sum(r.lag for r in snap.queues)
    if sup is not None:
        alive = sum(1 for w in sup.get("workers") or [] if w.get("alive"))
        workers = f"{alive}/{sup.get('workers_wanted', '?')}"
        counts = f"{_n(sup.get('records_in'))} records in, {_n(sup.get('records_out'))} out"
    else:
        workers = str(len(snap.workers))
        counts = f"{_totals(snap, 'processed'):,} records processed"
    rates = ""
    if rate_in is not None:
        rates = f" ({_per_s(rate_in)} in" + (
            f", {_per_s(rate_out)} out)" if rate_out is not None else ")"
        )
    extra = "".join(
        f", {_totals(snap, k):,} {label}"
        for k, label in (("late", "late"), ("skipped", "skipped"))
        if _totals(snap, k)
    )
    progress = snap.restoring or _restoring(snap.workers)
    restoring = f", restoring {_pct(*progress)}" if progress else ""
    return (
        f"{snap.job} {_state(snap)}: {counts}{rates}, lag {_n(lag)}, workers {workers}, "
        f"generation {snap.generation}{extra}{restoring}"
    )


# -- the dashboard ------------------------------------------------------------------------


def _header(snap: LiveSnapshot, previous: LiveSnapshot | None) -> Text:
    sup = snap.supervisor or {}
    text = Text()
    text.append(f"job {snap.job}", style="bold")
    text.append(f"  {_state(snap)}", style="green" if snap.running else "yellow")
    if sup.get("pipeline"):
        text.append(f"  pipeline {sup['pipeline']}")
    if sup.get("started"):
        end = float(sup.get("time", snap.time)) if not snap.running else snap.time
        text.append(f"  up {_age(end - float(sup['started']))}")
    alive = sum(1 for w in sup.get("workers") or [] if w.get("alive"))
    wanted = sup.get("workers_wanted")
    members = ", ".join(snap.members) or "none"
    text.append(
        f"\ngeneration {snap.generation}, {len(snap.members)} members ({members})"
        + (f", workers {alive}/{wanted} alive" if wanted is not None else "")
        + (f", {sup['restarts']} restarts" if sup.get("restarts") else "")
    )
    rate_in, rate_out = _records_rates(snap, previous)
    if sup:
        total, read = sup.get("bytes_total") or 0, sup.get("bytes_read") or 0
        text.append(
            f"\nrecords in {_n(sup.get('records_in'))} ({_per_s(rate_in)}), "
            f"out {_n(sup.get('records_out'))} ({_per_s(rate_out)}), lag {_n(sup.get('lag'))}"
            + (
                f"; input {100 * read / total:.0f}% of {decimal(total)} read"
                if total > 0 and read <= total
                else f"; input {decimal(read)} read"  # (a followed file grows)
            )
        )
    elif snap.workers:
        text.append(f"\nprocessed {_totals(snap, 'processed'):,} records ({_per_s(rate_in)})")
    text.append(
        f"\nlate {_totals(snap, 'late'):,}, skipped {_totals(snap, 'skipped'):,}, "
        f"dead-lettered {_totals(snap, 'dead_lettered'):,}"
    )
    restoring = snap.restoring or _restoring(snap.workers)
    if restoring:
        text.append(f", restoring state {_pct(*restoring)}", style="yellow")
    return text


def _step_label(
    step: StepNode, counts: dict[str, tuple[int, int]], rates: dict[str, float | None]
) -> Text:
    label = Text(step.name, style="bold")
    label.append(f" [{step.kind}]", style="dim")
    if step.repeated:
        label.append(" (see above)", style="dim")
        return label
    if step.name in counts:
        n_in, n_out = counts[step.name]
        label.append(f"  in {n_in:,} ({_per_s(rates.get(step.name))}), out {n_out:,}")
    return label


def _topology(snap: LiveSnapshot, previous: LiveSnapshot | None) -> RenderableType | None:
    counts = _step_counts(snap.workers)
    rates = _step_rates(snap, previous)
    shown: set[str] = set()
    if snap.topology is not None:
        tree = Tree(Text(f"topology of {snap.job}", style="bold"))

        def add(parent: Tree, step: StepNode) -> None:
            shown.add(step.name)
            branch = parent.add(_step_label(step, counts, rates))
            for child in step.children:
                add(branch, child)

        for sub in snap.topology:
            branch = tree.add(
                f"sub-topology {sub.id}: {', '.join(sub.source_topics)} → "
                f"{', '.join(sub.sink_topics) or '(no sink)'}"
            )
            for source in sub.sources:
                add(branch, source)
    else:
        tree = None
    rest = [name for name in counts if name not in shown]
    if not rest:
        return tree
    table = _table("steps", "step:<", "in", "in/s", "out")
    for name in sorted(rest):
        n_in, n_out = counts[name]
        table.add_row(name, f"{n_in:,}", _per_s(rates.get(name)), f"{n_out:,}")
    return table if tree is None else Group(tree, table)


def _workers(snap: LiveSnapshot, previous: LiveSnapshot | None) -> Table:
    table = _table(
        "workers (records processed, late, skipped, dead-lettered, restored from changelogs)",
        "worker:<", "pid", "gen", "tasks", "records", "rate", "commit avg", "late", "skip",
        "dead", "restored", "seen",
    )  # fmt: skip
    stats = {str(w.get("member")): w for w in snap.workers}
    for member in sorted(set(stats) | set(snap.members)):
        w = stats.get(member)
        info = snap.members.get(member, {})
        tasks = sum(1 for o in snap.owners.values() if o == member)
        if w is None:
            table.add_row(
                member, str(info.get("pid") or "-"), "", str(tasks), "-", "-", "-", "", "", "", "",
                f"{info.get('heartbeat_age_s', '?')}s",
            )  # fmt: skip
            continue
        rate = _worker_rate(w, previous, lambda s: float(s.get("processed", 0)))
        left = "" if member in snap.members or not snap.members else " (left)"
        table.add_row(
            member + left, str(w.get("pid", "-")), _n(w.get("generation")),
            str(tasks or len(w.get("tasks") or {})), _n(w.get("processed")), _per_s(rate),
            _commit_text(w.get("commits")), _n(w.get("late")), _n(w.get("skipped")),
            _n(w.get("dead_lettered")), _n(w.get("restored_records")),
            f"{max(0.0, snap.time - float(w.get('time', snap.time))):.0f}s",
        )  # fmt: skip
    return table


def _queues(snap: LiveSnapshot) -> Table:
    rows = list(snap.queues)
    hidden: list[QueueRow] = []
    if len(rows) > MAX_QUEUES:  # the ones that lag most, in their order
        keep = sorted(rows, key=lambda r: -r.lag)[:MAX_QUEUES]
        hidden = [r for r in rows if r not in keep]
        rows = [r for r in rows if r in keep]
    table = _table(
        "queues (lag: records past the committed offset)",
        "queue:<", "owner:<", "committed", "position", "end", "lag",
    )  # fmt: skip
    for r in rows:
        table.add_row(
            f"{r.topic}[{r.queue}]", r.owner or "-", f"{r.committed:,}", _n(r.position),
            f"{r.end:,}", f"{r.lag:,}",
        )  # fmt: skip
    if hidden:
        table.add_row(
            f"… {len(hidden)} more queues", "", "", "", "", f"{sum(r.lag for r in hidden):,}",
            style="dim",
        )  # fmt: skip
    return table


def _stores(snap: LiveSnapshot) -> Table | None:
    per_store: dict[str, list[int]] = {}  # tasks, entries, bytes (-1: unknown), restored
    restoring: dict[str, list[int]] = {}
    for w in snap.workers:
        tasks = w.get("tasks") or {}
        for key, s in (w.get("stores") or {}).items():
            name, _, task = str(key).rpartition("@")
            agg = per_store.setdefault(name or key, [0, 0, 0, 0])
            agg[0] += 1
            agg[1] += int(s.get("entries", 0))
            nbytes = s.get("bytes")
            agg[2] = -1 if nbytes is None or agg[2] < 0 else agg[2] + int(nbytes)
            agg[3] += int(s.get("restored", 0))
            progress = (tasks.get(task) or {}).get("restoring")
            if progress:
                r = restoring.setdefault(name or key, [0, 0])
                r[0] += int(progress[0])
                r[1] += int(progress[1])
    if not per_store:
        return None
    table = _table("state stores", "store:<", "tasks", "entries", "size", "restored", "restoring")
    for name, (tasks, entries, nbytes, restored) in sorted(per_store.items()):
        progress = restoring.get(name)
        table.add_row(
            name, str(tasks), f"{entries:,}", decimal(nbytes) if nbytes >= 0 else "-",
            f"{restored:,}", _pct(*progress) if progress else "done",
        )  # fmt: skip
    return table


def _errors(snap: LiveSnapshot) -> Text:
    errors = sorted(
        (float(e.get("time", 0)), str(w.get("member")), str(e.get("message", "")))
        for w in snap.workers
        for e in w.get("errors") or []
    )[-5:]
    if not errors:
        return Text("errors: none", style="dim")
    text = Text("errors (newest last):", style="bold red")
    for t, member, message in errors:
        stamp = time.strftime("%H:%M:%S", time.localtime(t))
        text.append(f"\n  {stamp} {member}: {message.splitlines()[0] if message else ''}")
    return text


def render(snap: LiveSnapshot, previous: LiveSnapshot | None = None) -> RenderableType:
    """The dashboard of ``snap``: job and group, the topology tree with each step's
    counts, workers, queues with their lag and owner, state stores, the last errors.
    Rates (records per second) are measured since ``previous`` (none without it)."""
    parts: list[RenderableType] = [_header(snap, previous)]
    topo = _topology(snap, previous)
    if topo is not None:
        parts.append(topo)
    elif snap.note:
        parts.append(Text(snap.note, style="dim"))
    if snap.workers or snap.members:
        parts.append(_workers(snap, previous))
    if snap.queues:
        parts.append(_queues(snap))
    stores = _stores(snap)
    if stores is not None:
        parts.append(stores)
    parts.append(_errors(snap))
    return Group(*parts)


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
    """Snapshots of one job, with the previous one for rates and the pipeline loaded once
    (``rstreams run --live`` feeds it from its progress callback)."""

    def __init__(self, data_dir: str, job: str, span: float = 2.0) -> None:
        self.data_dir, self.job = data_dir, job
        self._pacer = _Pacer(span)
        self._topology: Any = None
        self._note: str | None = None

    def take(self) -> tuple[LiveSnapshot, LiveSnapshot | None]:
        if self._topology is None:
            coord = JobLayout.of(self.data_dir, self.job).coordination.dir
            supervisor = read_stats(coord).supervisor
            if supervisor is not None:  # (until it publishes, the path is not known)
                topology, self._note = load_pipeline(supervisor)
                self._topology = topology if topology is not None else False
        topology = False if self._topology is None else self._topology
        snap = snapshot(self.data_dir, self.job, topology=topology)
        if topology is False:
            snap = attrs.evolve(snap, note=self._note)
        return snap, self._pacer.push(snap)

    def set_topology(self, topology: Any) -> None:
        self._topology = topology


def run_top(
    data_dir: str,
    job: str | None = None,
    refresh: float = 1.0,
    once: bool = False,
    *,
    console: Console | None = None,
) -> int:
    """Watch a job until Ctrl-C: the dashboard when ``console`` (stdout) is a terminal,
    else one :func:`plain_line` per refresh until the job ends. ``once``: one view and
    return (while the job runs, of two snapshots two seconds or ``refresh`` apart, for
    its rates)."""
    from rich.live import Live

    if refresh <= 0:
        raise ConfigError(f"--refresh must be > 0 seconds; got {refresh}")
    job = pick_job(data_dir, job)
    console = console or Console()
    watcher = LiveWatcher(data_dir, job, span=max(2.0, 2 * refresh))
    snap, previous = watcher.take()
    if once:
        if snap.running:
            time.sleep(max(refresh, 2.0))  # (statistics are published once a second)
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
    from rstreams.runtime.results import check_data_dir

    # (a data directory that does not exist: "no job" says more than "can not be created")
    check_data_dir(args.data_dir, write=os.path.exists(args.data_dir))
    return run_top(args.data_dir, args.job, refresh=args.refresh, once=args.once)


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

exit codes: 0 ok, 1 no such job (or its files can not be read), 2 bad usage
(e.g. several jobs and no JOB given), 130 interrupted (Ctrl-C)""",
        epilog="""\
example:
  rstreams run examples/wordcount.py --input big.txt --workers 2   # one terminal
  rstreams top wordcount                                          # another one
  rstreams top --once > status.txt                                # one line, for scripts

`rstreams run --live` shows the same dashboard in the terminal of the run.""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job", nargs="?", metavar="JOB", help="the job id (default: the only job)")
    p.add_argument("--data-dir", default=".rstreams", metavar="DIR", help="default ./.rstreams")
    p.add_argument(
        "--refresh", type=float, default=1.0, metavar="SECONDS", help="between updates (default 1)"
    )
    p.add_argument("--once", action="store_true", help="show one view and exit (for scripts)")
    common(p)
    p.set_defaults(func=cmd_top)


# -- rstreams run: progress and --live ----------------------------------------------------


def progress_text(p: Any, workers: bool = True) -> str:
    """What a :class:`~rstreams.runtime.results.Progress` says beside the bar: records in
    and out, lag, records per second, workers, restore progress (or the backend's own
    ``detail``, e.g. the running Spark stage).

    >>> from rstreams.runtime.results import Progress
    >>> progress_text(Progress(1500, 20, 10, 100, 2.0, lag=7, workers=2))
    '1,500 records in, 20 out, lag 7, 750 records/s, 2 workers'
    """
    if getattr(p, "detail", ""):
        return str(p.detail)
    rate = p.records_in / p.elapsed if p.elapsed > 0 else 0.0
    parts = [f"{p.records_in:,} records in", f"{p.records_out:,} out"]
    if p.lag is not None:
        parts.append(f"lag {p.lag:,}")
    parts.append(f"{rate:,.0f} records/s")
    n = getattr(p, "workers", None)
    if workers and n is not None:
        parts.append(f"{n} worker{'s' if n != 1 else ''}")
    restoring = getattr(p, "restoring", None)
    if restoring:
        parts.append(f"restoring state {_pct(*restoring)}")
    return ", ".join(parts)


class RunProgress:
    """The progress of ``rstreams run`` on stderr: on a terminal a ``rich`` progress bar
    (bytes of input read, with :func:`progress_text` beside it), cleared at the end;
    otherwise (a CI log, a file) one plain line every ``every`` seconds. Silent when not
    ``enabled`` (``-q``). Call it with each Progress, then :meth:`done`."""

    def __init__(self, enabled: bool, every: float = 5.0, console: Console | None = None) -> None:
        self.enabled = enabled
        self.console = console or Console(stderr=True)
        self.every = every
        self._bar: Any = None
        self._task: Any = None
        self._started = time.monotonic()
        self._last_line = self._started

    def __call__(self, p: Any) -> None:
        if not self.enabled:
            return
        if not self.console.is_terminal:
            now = time.monotonic()
            if now - self._last_line >= self.every:
                self._last_line = now
                # (capped: a growing input may have been read past the size it had when
                # the snapshot's total was taken)
                pct = (
                    f", {min(100.0, 100 * p.bytes_read / p.bytes_total):.0f}% of input"
                    if p.bytes_total
                    else ""
                )
                print(
                    f"  {progress_text(p)}{pct} ({p.elapsed:,.0f}s)",
                    file=self.console.file,
                    flush=True,
                )
            return
        if self._bar is None:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

            self._bar = Progress(
                BarColumn(bar_width=30),
                DownloadColumn(),
                # (the run's own clock: rich's stops when the bar is full, which is when
                # the input is read, not processed)
                TextColumn("{task.fields[info]}  {task.fields[elapsed]}", markup=False),
                console=self.console,
                transient=True,
                refresh_per_second=4,
            )
            self._bar.start()
            self._task = self._bar.add_task("run", total=None, info="", elapsed="")
        self._bar.update(
            self._task,
            completed=min(p.bytes_read, p.bytes_total) if p.bytes_total else p.bytes_read,
            total=p.bytes_total or None,
            info=progress_text(p),
            elapsed=_age(p.elapsed),
        )

    def done(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


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
