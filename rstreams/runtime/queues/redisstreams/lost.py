"""The error for data Redis acknowledged and no longer has, and what a process saw its
queues reach, by which such a loss is seen."""

from __future__ import annotations

from rstreams.errors import RStreamsError
from rstreams.runtime.queues._files import CorruptLogError

_FIX = (
    "Redis lost data it had acknowledged: it restarted without its data (appendonly no, or "
    "appendfsync everysec and a crash), or something deleted or trimmed the stream under "
    "the job. Nothing was written on top of it. Rebuild the job from its input with "
    "`rstreams run ... --fresh`, and run Redis with `appendonly yes` and `appendfsync "
    "always` so this cannot happen again (docs/redis.md#faults)"
)


class RedisDataLostError(CorruptLogError):
    """A queue of the job on Redis ends below a position it had reached: a committed
    offset, or a stream that is gone altogether. A :class:`CorruptLogError` (the run
    stops as it does for a damaged file log); ``segment`` is the stream's key."""

    def __init__(
        self, topic: str, queue: int, key: str, reason: str, *, offset: int | None = None
    ) -> None:
        RStreamsError.__init__(
            self, f"lost data on Redis in {topic!r}[{queue}]: stream {key} {reason}. {_FIX}"
        )
        self.topic = topic
        self.queue = queue
        self.segment = key
        self.position = None
        self.offset = offset
        self.reason = reason


class RedisDataDamagedError(CorruptLogError):
    """A number the job keeps in a Redis hash (an offset, a queue's start or end) holds
    something else: a hand edit or damage. The run stops before it reads or writes with
    a wrong offset (exit 1)."""

    def __init__(self, key: str, field: str, value: bytes | str) -> None:
        shown = value.decode(errors="backslashreplace") if isinstance(value, bytes) else value
        RStreamsError.__init__(
            self,
            f"damaged job data on Redis: the hash {key} holds {shown[:80]!r} in field "
            f"{field!r}, where the job keeps a number (an offset). Something other than "
            "rstreams wrote it. Restore it if you know the value, or rebuild the job from "
            "its input with `rstreams run ... --fresh` (docs/redis.md#faults)",
        )
        self.segment = key
        self.topic, self.queue, self.position, self.offset = "", 0, None, None


def number(raw: bytes | str | None, key: str, field: str) -> int:
    """The integer a job's hash holds in ``field`` (0 if absent), or
    :class:`RedisDataDamagedError`."""
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise RedisDataDamagedError(key, field, raw) from None


class Reached:
    """Per stream key, the highest end this process saw a queue reach (its end, a read,
    a committed offset). A stream's end never goes down, so an end below it, or a
    stream that is gone, is a :class:`RedisDataLostError` naming that position."""

    __slots__ = ("_ends",)

    def __init__(self) -> None:
        self._ends: dict[str, tuple[str, int, int]] = {}

    def note(self, topic: str, queue: int, key: str, at_least: int, *, end: bool) -> None:
        """Note that the queue's end is at least ``at_least`` (``end``: is exactly that,
        then a :class:`RedisDataLostError` if this process saw it reach more)."""
        reached = self._ends.get(key, (topic, queue, 0))[2]
        if end and at_least < reached:
            raise RedisDataLostError(
                topic, queue, key,
                f"ends at offset {at_least} but the job had reached offset {reached}",
                offset=at_least,
            )  # fmt: skip
        if at_least > reached:
            self._ends[key] = (topic, queue, at_least)

    def gone(self, topic: str, queue: int, key: str, offset: int | None) -> RedisDataLostError:
        """The error for a queue's stream that no longer exists (``offset``: the
        position the caller was at, if any)."""
        reached = self._ends.get(key, (topic, queue, 0))[2]
        if offset is not None:
            reached = max(reached, offset)
        return RedisDataLostError(
            topic, queue, key,
            f"does not exist although the topic does (the job had reached offset {reached})",
            offset=offset,
        )  # fmt: skip

    def queues(self) -> list[tuple[str, int]]:
        """Every (topic, queue) whose end this process saw."""
        return [(topic, queue) for topic, queue, _ in self._ends.values()]
