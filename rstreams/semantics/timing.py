"""What the window and join state machines share: stream time, the expiry heap's key
and the state interface they keep their records in.

**Stream time** is the time lateness and closing are judged by. The caller passes the
watermark of its input when it has one (the embedded engine: the watermark of the
shuffle producers feeding a task; Spark: whatever its replay decides), else None: then,
as in Kafka Streams, stream time is the largest record timestamp seen. It only moves
forward; callers keep it with their state so it survives restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["NO_TIME", "DictState", "Emit", "HeapKey", "State", "TimedCore"]

#: Stream time before any record: earlier than every timestamp.
NO_TIME = -(2**62)

#: ``emit(key, value, timestamp, offset)``: one result, with the offset of the input
#: record it derives from (-1 when time, not a record, caused it).
Emit = Callable[[Any, Any, int, int], None]


class State(Protocol):
    """The store a state machine keeps its entries in (keys are tuples; a value of None
    is no entry). The embedded engine's store stack and :class:`DictState` are both."""

    def get(self, key: Any, default: Any = None) -> Any: ...

    def put(self, key: Any, value: Any) -> None: ...

    def delete(self, key: Any) -> None: ...

    def items(self) -> Iterable[tuple[Any, Any]]: ...


class DictState:
    """:class:`State` over a plain dict (Spark's per-queue state, unit tests)."""

    __slots__ = ("data",)

    def __init__(self, data: dict[Any, Any] | None = None) -> None:
        self.data: dict[Any, Any] = {} if data is None else data

    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value

    def delete(self, key: Any) -> None:
        self.data.pop(key, None)

    def items(self) -> Iterable[tuple[Any, Any]]:
        return list(self.data.items())


class HeapKey:
    """A record key in a heap entry: heap entries compare by time, then start; keys
    themselves may not be orderable (equal times pop in insertion-dependent order,
    the same on every backend since they share this heap)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __lt__(self, other: HeapKey) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


class TimedCore:
    """Base of the window and join state machines: stream time and the largest
    timestamp seen (after a restore, a lower bound), the state and the emit callback.

    ``emit`` may be replaced between calls (an adapter collecting a batch at a time).
    """

    def __init__(self, state: State, emit: Emit, time: int = NO_TIME) -> None:
        self.state = state
        self.emit = emit
        self.time = time
        self.max_time = time

    def see(self, ts: int, watermark: int | None) -> None:
        """A record at ``ts`` arrives: stream time follows (:meth:`advance_time`)."""
        if ts > self.max_time:
            self.max_time = ts
            self.advance_time(watermark)

    def advance_time(self, watermark: int | None) -> bool:
        """Stream time = ``watermark`` if the input carries one, else the largest
        timestamp seen; never backwards. True if it moved."""
        t = self.max_time if watermark is None else watermark
        if t > self.time:
            self.time = t
            return True
        return False

    def advance(self, watermark: int | None) -> bool:
        """The input's watermark moved: close and expire what the new stream time
        allows (results carry offset -1). True if stream time moved."""
        if self.advance_time(watermark):
            self.expire(-1)
            return True
        return False

    def expire(self, off: int) -> None:
        """Close and expire what stream time has passed."""
        raise NotImplementedError

    def end_of_input(self) -> None:
        """Bounded input ended: emit what waits for more input."""
        raise NotImplementedError
