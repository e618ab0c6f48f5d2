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


def to_ms(value: int | datetime.timedelta, what: str, *, positive: bool = False) -> int:
    """``value`` (int milliseconds or a :class:`datetime.timedelta`) in milliseconds.

    ``what`` names the parameter in errors, which also say the value received and the
    unit:

    >>> to_ms(datetime.timedelta(seconds=1.5), "ttl")
    1500
    >>> to_ms(-5, "SessionWindow gap")
    Traceback (most recent call last):
    ...
    rstreams.errors.TopologyError: SessionWindow gap must not be negative; got -5 ms
    """
    if isinstance(value, datetime.timedelta):
        ms, rest = divmod(value, datetime.timedelta(milliseconds=1))
        if rest:
            raise TopologyError(
                f"{what} must be a whole number of milliseconds; got {value!r} "
                f"({value / datetime.timedelta(milliseconds=1)} ms)"
            )
    elif isinstance(value, int) and not isinstance(value, bool):
        ms = value
    else:
        raise TopologyError(
            f"{what} must be milliseconds (int) or a datetime.timedelta; "
            f"got {type(value).__name__} {value!r}"
        )
    if ms < 0:
        raise TopologyError(f"{what} must not be negative; got {ms} ms")
    if positive and ms == 0:
        raise TopologyError(f"{what} must be positive; got 0 ms")
    return ms


def _fields(spec: Any, *names: str) -> str:
    return ", ".join(f"{name}={getattr(spec, name)} ms" for name in names)


@attrs.frozen
class TumblingWindow:
    """Fixed, non-overlapping windows ``[n*size, (n+1)*size)``.

    ``size`` and ``grace`` are milliseconds (int) or :class:`datetime.timedelta`; a
    result's window is ``[start, end)`` in epoch milliseconds.

    >>> from datetime import timedelta
    >>> w = TumblingWindow(timedelta(minutes=1), grace=timedelta(seconds=5))
    >>> w
    TumblingWindow(size=60000, grace=5000)
    >>> print(w)
    tumbling size=60000 ms, grace=5000 ms
    >>> w.windows_for(61_000)
    [(60000, 120000)]
    >>> TumblingWindow(0)
    Traceback (most recent call last):
    ...
    rstreams.errors.TopologyError: TumblingWindow size must be positive; got 0 ms
    """

    size: int = attrs.field(converter=lambda v: to_ms(v, "TumblingWindow size", positive=True))
    grace: int = attrs.field(default=0, converter=lambda v: to_ms(v, "TumblingWindow grace"))

    @property
    def advance(self) -> int:
        return self.size

    def windows_for(self, ts: int) -> list[tuple[int, int]]:
        start = ts - ts % self.size
        return [(start, start + self.size)]

    def __str__(self) -> str:
        return f"tumbling {_fields(self, 'size', 'grace')}"


@attrs.frozen
class HoppingWindow:
    """Windows of ``size`` starting every ``advance`` (RocketMQ's sliding window).

    ``size``, ``advance`` and ``grace`` are milliseconds (int) or
    :class:`datetime.timedelta`.

    >>> from datetime import timedelta
    >>> w = HoppingWindow(timedelta(minutes=1), timedelta(seconds=30))
    >>> print(w)
    hopping size=60000 ms, advance=30000 ms, grace=0 ms
    >>> w.windows_for(45_000)
    [(0, 60000), (30000, 90000)]
    >>> HoppingWindow(10, 20)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rstreams.errors.TopologyError: HoppingWindow advance (20 ms) must not exceed its size (10 ms)...
    """

    size: int = attrs.field(converter=lambda v: to_ms(v, "HoppingWindow size", positive=True))
    advance: int = attrs.field(converter=lambda v: to_ms(v, "HoppingWindow advance", positive=True))
    grace: int = attrs.field(default=0, converter=lambda v: to_ms(v, "HoppingWindow grace"))

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

    def __str__(self) -> str:
        return f"hopping {_fields(self, 'size', 'advance', 'grace')}"


def SlidingWindow(
    size: int | datetime.timedelta,
    slide: int | datetime.timedelta,
    grace: int | datetime.timedelta = 0,
) -> HoppingWindow:
    """Alias of :class:`HoppingWindow` (RocketMQ Streams calls hopping windows sliding).

    >>> SlidingWindow(10_000, 5_000)
    HoppingWindow(size=10000, advance=5000, grace=0)
    """
    return HoppingWindow(size, slide, grace)


@attrs.frozen
class SessionWindow:
    """Sessions of activity per key: records less than ``gap`` apart share a session.

    ``gap`` and ``grace`` are milliseconds (int) or :class:`datetime.timedelta`.

    >>> from datetime import timedelta
    >>> print(SessionWindow(timedelta(minutes=5)))
    session gap=300000 ms, grace=0 ms
    >>> SessionWindow(-1)
    Traceback (most recent call last):
    ...
    rstreams.errors.TopologyError: SessionWindow gap must not be negative; got -1 ms
    """

    gap: int = attrs.field(converter=lambda v: to_ms(v, "SessionWindow gap", positive=True))
    grace: int = attrs.field(default=0, converter=lambda v: to_ms(v, "SessionWindow grace"))

    def __str__(self) -> str:
        return f"session {_fields(self, 'gap', 'grace')}"


@attrs.frozen
class JoinWindow:
    """A left record at ``ts`` joins right records in ``[ts - before, ts + after]``.

    ``before``, ``after`` and ``grace`` are milliseconds (int) or
    :class:`datetime.timedelta`.

    >>> from datetime import timedelta
    >>> print(JoinWindow(timedelta(seconds=10), 0))
    join before=10000 ms, after=0 ms, grace=0 ms
    >>> JoinWindow(0, 2.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rstreams.errors.TopologyError: JoinWindow after must be milliseconds (int) or ...; got float 2.5
    """

    before: int = attrs.field(converter=lambda v: to_ms(v, "JoinWindow before"))
    after: int = attrs.field(converter=lambda v: to_ms(v, "JoinWindow after"))
    grace: int = attrs.field(default=0, converter=lambda v: to_ms(v, "JoinWindow grace"))

    def __str__(self) -> str:
        return f"join {_fields(self, 'before', 'after', 'grace')}"


#: What ``GroupedStream.window(...)`` accepts: a tumbling, hopping (sliding) or session
#: window.
Window = TumblingWindow | HoppingWindow | SessionWindow
WindowSpec = Window
