"""Drawing a :class:`~rstreams.live.snapshot.LiveSnapshot`: the ``rich`` dashboard of
:func:`render` and the one line of :func:`plain_line` (with records per second measured
against the snapshot before it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.filesize import decimal
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from rstreams.live.snapshot import LiveSnapshot, QueueRow, StepNode, _alive
from rstreams.progress import _age, _pct
from rstreams.runtime.engine.tasks.lifecycle import SupervisorState

__all__ = ["MAX_QUEUES", "plain_line", "render"]

#: Queue rows shown; the rest are summed in one row (the ones with most lag are shown).
MAX_QUEUES = 12


#: In a :class:`_Sheet`'s ``drop``: shorten the names from here on (down to
#: ``_SHORT_NAME`` cells) rather than leave out the columns named after it.
_SHORTEN = "…"
#: The fewest cells :data:`_SHORTEN` shortens a name to.
_SHORT_NAME = 20
#: The fewest cells the narrowest layout shortens a name to (then the terminal cuts).
_MIN_NAME = 12


class _Sheet:
    """A table drawn to fit the width it is given (the terminal's, each time it is
    drawn): the columns named in ``drop`` are left out, in that order (the least useful
    first), until it fits; from :data:`_SHORTEN` in ``drop`` on, and in the narrowest
    layout, the names in the first column are shortened in the middle instead
    (``wordcount…shuffle[0]``). Headers are never cut while a layout fits, and there is
    no edge, so that as many rows as possible fit a terminal.

    ``"name:<"`` is a column of text, ``"name"`` one of numbers (right-aligned); the first
    column holds the rows' names. ``title``: a text, or the text for the headers shown;
    without what it says in parentheses when that does not fit the width.

    >>> import io
    >>> from rich.console import Console
    >>> sheet = _Sheet("queues", ["queue:<", "committed", "end", "lag"], drop=["end"])
    >>> sheet.add_row("a-long-topic-name[3]", "1,000", "1,200", "200")
    >>> for width in (50, 40, 30):
    ...     console = Console(file=io.StringIO(), width=width, color_system=None)
    ...     console.print(sheet)
    ...     print(console.file.getvalue().splitlines()[1])
    ...     print(console.file.getvalue().splitlines()[3])
    queue                 committed    end  lag
    a-long-topic-name[3]      1,000  1,200  200
    queue                 committed  lag
    a-long-topic-name[3]      1,000  200
    queue           committed  lag
    a-long…name[3]      1,000  200
    """

    def __init__(
        self,
        title: str | Callable[[list[str]], str],
        columns: Iterable[str],
        drop: Iterable[str] = (),
    ) -> None:
        self.title = title
        self.columns = [(c.partition(":")[0], c.partition(":")[2] == "<") for c in columns]
        self.drop = list(drop)
        self.rows: list[tuple[list[str], str | None]] = []

    def add_row(self, *cells: str, style: str | None = None) -> None:
        self.rows.append((list(cells), style))

    def _layouts(self) -> Iterator[tuple[list[int], int | None]]:
        """The columns shown and the fewest cells names may be shortened to (None: not
        shortened), widest layout first."""
        shown, shortest = list(range(len(self.columns))), None
        yield shown, shortest
        for name in self.drop:
            if name == _SHORTEN:
                shortest = _SHORT_NAME
            else:
                shown = [i for i in shown if self.columns[i][0] != name]
            yield shown, shortest
        yield shown, _MIN_NAME

    def _table(self, shown: list[int], names: int | None = None) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        for i in shown:
            name, text = self.columns[i]
            # (a row per line: a cell too wide for the terminal is cut, not wrapped)
            table.add_column(name, justify="left" if text else "right", no_wrap=True)
        for cells, style in self.rows:
            row = [cells[i] for i in shown]
            if names is not None and row:
                row[0] = _squeeze(row[0], names)
            table.add_row(*row, style=style)
        return table

    def _fit(self, console: Console, options: ConsoleOptions) -> tuple[str, Table]:
        width = options.max_width
        natural = options.update_width(1_000_000)  # (no column squeezed)
        for shown, shortest in self._layouts():
            table = self._table(shown)
            excess = Measurement.get(console, natural, table).maximum - width
            if excess <= 0:
                break
            if shortest is not None and shown:
                header = cell_len(self.columns[shown[0]][0])
                longest = max((cell_len(cells[shown[0]]) for cells, _ in self.rows), default=0)
                names = max(longest - excess, header, shortest)
                if names + excess <= longest or shortest == _MIN_NAME:
                    table = self._table(shown, names)
                    break
        headers = [self.columns[i][0] for i in shown]
        title = self.title if isinstance(self.title, str) else self.title(headers)
        if cell_len(title) > width:
            title = title.partition(" (")[0]
        return title, table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        title, table = self._fit(console, options)
        yield Text(title, style="bold")
        yield table

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        title, table = self._fit(console, options)
        return Measurement.get(console, options, Group(Text(title), table))


def _squeeze(name: str, width: int) -> str:
    """``name`` in ``width`` cells at most, cut in the middle so that both ends show (a
    queue's number, a store's suffix).

    >>> _squeeze("wordcount-sentences-count-3-shuffle[0]", 20)
    'wordcount…shuffle[0]'
    >>> _squeeze("w0-1", 20)
    'w0-1'
    """
    if cell_len(name) <= width:
        return name
    head = (width - 1) // 2
    tail = width - 1 - head
    return name[:head] + "…" + (name[-tail:] if tail > 0 else "")


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


def _state(snap: LiveSnapshot) -> str:
    sup = snap.supervisor
    if sup is None:
        return "no statistics yet" if not snap.workers else "running"
    state = str(sup.get("state", "?"))
    if state == SupervisorState.RUNNING and not _alive(sup.get("pid")):
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
    table = _Sheet("steps", ["step:<", "in", "in/s", "out"], drop=[_SHORTEN, "out"])
    for name in sorted(rest):
        n_in, n_out = counts[name]
        table.add_row(name, f"{n_in:,}", _per_s(rates.get(name)), f"{n_out:,}")
    return table if tree is None else Group(tree, table)


#: What the workers' table's terse headers stand for (in its title, for those shown).
_WORKER_LEGEND = {
    "records": "records processed", "late": "late", "skip": "skipped", "dead": "dead-lettered",
    "restored": "restored from changelogs",
}  # fmt: skip


def _workers_title(headers: list[str]) -> str:
    legend = [_WORKER_LEGEND[h] for h in headers if h in _WORKER_LEGEND]
    return f"workers ({', '.join(legend)})" if legend else "workers"


def _workers(snap: LiveSnapshot, previous: LiveSnapshot | None) -> _Sheet:
    # Narrower terminals: the generation is in the header, late, skipped and dead-lettered
    # records are summed there too, and what was restored is in the state stores' table.
    table = _Sheet(
        _workers_title,
        ["worker:<", "pid", "gen", "tasks", "records", "rate", "commit avg", "late", "skip",
         "dead", "restored", "seen"],
        drop=["gen", "restored", "dead", "skip", "late", "pid", _SHORTEN, "tasks", "seen",
              "commit avg"],
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


def _queues(snap: LiveSnapshot) -> _Sheet:
    rows = list(snap.queues)
    hidden: list[QueueRow] = []
    if len(rows) > MAX_QUEUES:  # the ones that lag most, in their order
        keep = sorted(rows, key=lambda r: -r.lag)[:MAX_QUEUES]
        hidden = [r for r in rows if r not in keep]
        rows = [r for r in rows if r in keep]
    # (narrower: the end is the committed offset plus the lag)
    table = _Sheet(
        "queues (lag: records past the committed offset)",
        ["queue:<", "owner:<", "committed", "position", "end", "lag"],
        drop=["position", "end", _SHORTEN],
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


def _stores(snap: LiveSnapshot) -> _Sheet | None:
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
    table = _Sheet(
        "state stores",
        ["store:<", "tasks", "entries", "size", "restored", "restoring"],
        drop=["restored", "tasks", _SHORTEN, "entries"],
    )  # fmt: skip
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
