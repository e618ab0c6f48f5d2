"""The key type of windowed results (kept dependency-free: serdes know it)."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen(order=True)
class Windowed:
    """The key of a windowed result: the record key and the window ``[start, end)``
    (for sessions, ``end`` is the last record's timestamp, inclusive).

    ``closed`` says, for results emitted on close, whether the window closed by event
    time (``"event-time"``) or after idling (``"idle"``); it is not part of equality.

    >>> Windowed("k", 0, 10) == Windowed("k", 0, 10, closed="idle")
    True
    """

    key: Any
    start: int
    end: int
    closed: str | None = attrs.field(default=None, eq=False, order=False)
