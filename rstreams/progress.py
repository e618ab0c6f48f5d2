"""The progress of ``rstreams run`` on stderr: a ``rich`` progress bar on a terminal,
plain lines otherwise (``rstreams run --live`` shows the dashboard of
:mod:`rstreams.live` instead). Apart from that package so that a run loads no more than
this (and ``rich`` only when it shows progress)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["RunProgress", "progress_text"]


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _pct(done: int, total: int) -> str:
    return f"{100 * done / total:.0f}% ({done:,}/{total:,})" if total else "-"


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
        self._console = console
        self.every = every
        self._bar: Any = None
        self._task: Any = None
        self._started = time.monotonic()
        self._last_line = self._started

    @property
    def console(self) -> Console:
        """Where the progress goes: stderr's console, made on first use (rich loads only
        for a run that shows progress)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True)
        return self._console

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
