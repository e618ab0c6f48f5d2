"""The key type of windowed results and the one flat shape they are written in (kept
dependency-free: serdes know it).

A windowed aggregation's results are keyed by :class:`Windowed`: the record key, the
window and, for results emitted on close, why it closed. Everything that shows a result
to people or tools (``rstreams run --output``, ``rstreams consume --format json``,
:func:`result_row`) writes it flat, the window beside the key, never inside it:

    >>> w = Windowed("gus", 0, 60_000, closed="event-time")
    >>> w.key, w.window.start, w.window.end, w.closed
    ('gus', 0, 60000, 'event-time')
    >>> result_row(w, 3)
    {'key': 'gus', 'window': {'start': 0, 'end': 60000}, 'closed': 'event-time', 'value': 3}
    >>> result_row("gus", 3)
    {'key': 'gus', 'value': 3}
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["TimeWindow", "Windowed", "result_row"]


@attrs.frozen(order=True)
class TimeWindow:
    """A window of event time in epoch milliseconds: ``[start, end)``, or for a
    session ``[start, end]`` (its first and last record's timestamps).

    >>> TimeWindow(0, 60_000).to_dict()
    {'start': 0, 'end': 60000}
    """

    start: int
    end: int

    def to_dict(self) -> dict[str, int]:
        """``{"start": start, "end": end}``, as results are written."""
        return {"start": self.start, "end": self.end}


@attrs.frozen(order=True)
class Windowed:
    """The key of a windowed result: the record key and the window ``[start, end)``
    (for sessions, ``end`` is the last record's timestamp, inclusive).

    ``closed`` says, for results emitted on close, whether the window closed by event
    time (``"event-time"``), after idling (``"idle"``) or at the end of a bounded input
    (``"end-of-input"``); it is not part of equality. :attr:`window` holds the bounds
    as a :class:`TimeWindow`.

    >>> Windowed("k", 0, 10) == Windowed("k", 0, 10, closed="idle")
    True
    >>> Windowed("k", 0, 10).window
    TimeWindow(start=0, end=10)
    """

    key: Any
    start: int
    end: int
    closed: str | None = attrs.field(default=None, eq=False, order=False)

    @property
    def window(self) -> TimeWindow:
        """The window's bounds: ``.window.start`` and ``.window.end``."""
        return TimeWindow(self.start, self.end)

    def __str__(self) -> str:
        """How ``run``'s summary and ``print()`` show it.

        >>> print(Windowed("gus", 0, 60000, closed="idle"))
        gus (window 0..60000, closed: idle)
        """
        closed = "" if self.closed is None else f", closed: {self.closed}"
        return f"{self.key} (window {self.start}..{self.end}{closed})"

    def to_dict(self) -> dict[str, Any]:
        """The flat shape: ``{"key": ..., "window": {"start": ..., "end": ...}}``, plus
        ``"closed"`` when the result was emitted on close.

        >>> Windowed("k", 0, 10, closed="idle").to_dict()
        {'key': 'k', 'window': {'start': 0, 'end': 10}, 'closed': 'idle'}
        """
        out: dict[str, Any] = {"key": self.key, "window": {"start": self.start, "end": self.end}}
        if self.closed is not None:
            out["closed"] = self.closed
        return out


def result_row(key: Any, value: Any) -> dict[str, Any]:
    """One result as people and tools see it: ``{"key": key, "value": value}``, and for
    a :class:`Windowed` key ``{"key": user key, "window": {"start": s, "end": e},
    ["closed": why,] "value": value}``. The JSON lines of ``rstreams run --output`` and
    ``rstreams consume --format json`` are these rows.

    >>> result_row(Windowed(("a", 1), 5, 15), None)
    {'key': ('a', 1), 'window': {'start': 5, 'end': 15}, 'value': None}
    """
    if isinstance(key, Windowed):
        return {**key.to_dict(), "value": value}
    return {"key": key, "value": value}
