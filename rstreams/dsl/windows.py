"""Window specifications and the windowed key type.

Sizes are milliseconds (int) or :class:`datetime.timedelta`. Windows are aligned to the
epoch: a hopping window starts at every multiple of ``advance``.

    >>> from datetime import timedelta
    >>> TumblingWindow(timedelta(minutes=1)).size
    60000
    >>> HoppingWindow(10, 5).windows_for(12)
    [(5, 15), (10, 20)]
    >>> Windowed("k", 0, 10)
    Windowed(key='k', start=0, end=10, closed=None)
"""

from __future__ import annotations

import datetime
from typing import Any

import attrs

from rstreams.errors import TopologyError
from rstreams.windowed import Windowed

__all__ = [
    "HoppingWindow",
    "JoinWindow",
    "SessionWindow",
    "SlidingWindow",
    "TumblingWindow",
    "Window",
    "Windowed",
    "to_ms",
]


def to_ms(value: int | datetime.timedelta, what: str) -> int:
    if isinstance(value, datetime.timedelta):
        ms = value // datetime.timedelta(milliseconds=1)
    elif isinstance(value, int) and not isinstance(value, bool):
        ms = value
    else:
        raise TopologyError(
            f"{what} must be milliseconds (int) or a datetime.timedelta; got {value!r}"
        )
    if ms < 0:
        raise TopologyError(f"{what} must not be negative; got {ms} ms")
    return ms


def _positive(value: Any) -> int:
    ms = to_ms(value, "a window size")
    if ms == 0:
        raise TopologyError("a window size, advance or gap must be positive; got 0")
    return ms


def _ms(value: Any) -> int:
    return to_ms(value, "a grace period or join bound")


@attrs.frozen
class TumblingWindow:
    """Fixed, non-overlapping windows ``[n*size, (n+1)*size)``."""

    size: int = attrs.field(converter=_positive)
    grace: int = attrs.field(default=0, converter=_ms)

    @property
    def advance(self) -> int:
        return self.size

    def windows_for(self, ts: int) -> list[tuple[int, int]]:
        start = ts - ts % self.size
        return [(start, start + self.size)]


@attrs.frozen
class HoppingWindow:
    """Windows of ``size`` starting every ``advance`` (RocketMQ's sliding window)."""

    size: int = attrs.field(converter=_positive)
    advance: int = attrs.field(converter=_positive)
    grace: int = attrs.field(default=0, converter=_ms)

    def __attrs_post_init__(self) -> None:
        if self.advance > self.size:
            raise TopologyError(
                f"HoppingWindow advance ({self.advance} ms) must not exceed its size "
                f"({self.size} ms): records between windows would fall in none"
            )

    def windows_for(self, ts: int) -> list[tuple[int, int]]:
        """Every window [s, s+size), s a multiple of advance, s >= 0, containing ts."""
        last = ts - ts % self.advance
        out = []
        s = last
        while s >= 0 and s + self.size > ts:
            out.append((s, s + self.size))
            s -= self.advance
        return out[::-1]


def SlidingWindow(
    size: int | datetime.timedelta, slide: int | datetime.timedelta, grace: int = 0
) -> HoppingWindow:
    """Alias of :class:`HoppingWindow` (RocketMQ Streams calls hopping windows sliding)."""
    return HoppingWindow(size, slide, grace)


@attrs.frozen
class SessionWindow:
    """Sessions of activity per key: records less than ``gap`` apart share a session."""

    gap: int = attrs.field(converter=_positive)
    grace: int = attrs.field(default=0, converter=_ms)


@attrs.frozen
class JoinWindow:
    """A left record at ``ts`` joins right records in ``[ts - before, ts + after]``."""

    before: int = attrs.field(converter=_ms)
    after: int = attrs.field(converter=_ms)
    grace: int = attrs.field(default=0, converter=_ms)


#: What ``GroupedStream.window(...)`` accepts: a tumbling, hopping (sliding) or session
#: window.
Window = TumblingWindow | HoppingWindow | SessionWindow
WindowSpec = Window
