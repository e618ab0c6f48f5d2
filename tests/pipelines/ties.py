"""Ties: records at exactly the time that closes a window, a session or a join record.

One input (lines ``key timestamp side value``) feeds every kind of timed step, each
after a keyBy into several queues: sessions (gap 4) emitting on close and in update
mode, tumbling windows emitting on close, hopping windows in update mode, and a
windowed outer join of the ``L`` and ``R`` lines. The input is in time order with many
equal timestamps, and steps of exactly a session's gap, a window's size and a join's
reach: so a record often comes at the very time another key's record, on another
queue, brought stream time to (a session ending ``gap`` earlier, a join record
``before + after`` earlier). Which queue sees which record first, and where batches
and restarts cut the input, must not change any table (docs/windows.md, ties):
tests/integration/test_ties_property.py.
"""

from __future__ import annotations

import random

from rstreams import HoppingWindow, JoinWindow, SessionWindow, StreamBuilder, TumblingWindow

#: The sessions' gap, the windows' size and advance, the join's reach (ms).
GAP, SIZE, ADVANCE, BEFORE, AFTER = 4, 10, 5, 2, 2


def _key(line: str) -> str:
    return line.split()[0]


def _ts(line: str) -> int:
    return int(line.split()[1])


def _side(line: str) -> str:
    return line.split()[2]


def _value(line: str) -> int:
    return int(line.split()[3])


def _joiner(left: str | None, right: str | None) -> str:
    return f"{left} + {right}"


def pipeline(
    queues: int = 3, source_queues: int = 1, grace: int = 0, merged_late: bool = False
) -> StreamBuilder:
    """Every timed step over ``events`` (``source_queues`` queues), each with
    ``queues`` queues and ``grace``; ``merged_late``: the steps' late records in one
    sink, ``late`` (else one per step, ``late-<step>``)."""
    b = StreamBuilder("ties")
    events = b.source("events", queues=source_queues).selectTimestamp(_ts)
    keyed = events.keyBy(_key)
    sessions = keyed.window(SessionWindow(GAP, grace=grace), emit="close").count(
        name="sessions", queues=queues
    )
    sessions.toRStream().sink("sessions", name="sessions-sink")
    sums = keyed.window(SessionWindow(GAP, grace=grace)).sum(
        _value, name="session-sums", queues=queues
    )
    sums.toRStream().sink("session-sums", name="session-sums-sink")
    tumbling = keyed.window(TumblingWindow(SIZE, grace=grace), emit="close").count(
        name="tumbling", queues=queues
    )
    tumbling.toRStream().sink("tumbling", name="tumbling-sink")
    hopping = keyed.window(HoppingWindow(SIZE, ADVANCE, grace=grace)).count(
        name="hopping", queues=queues
    )
    hopping.toRStream().sink("hopping", name="hopping-sink")
    steps = (("sessions", sessions), ("session-sums", sums), ("tumbling", tumbling),
             ("hopping", hopping))  # fmt: skip
    if merged_late:
        # Merged, the late records make one sub-topology of the four steps: one task
        # reads four shuffles from the same producers, and judges each by its own.
        first, *others = (windowed.late() for _, windowed in steps)
        first.merge(*others).keyBy(lambda line: line).sink("late", name="late-sink")
    else:
        for step, windowed in steps:
            late = windowed.late().keyBy(lambda line: line)
            late.sink(f"late-{step}", name=f"late-{step}-sink")
    left = events.filter(lambda line: _side(line) == "L")
    right = events.filter(lambda line: _side(line) == "R")
    (
        left.outerJoin(right)
        .where(_key)
        .equalTo(_key)
        .window(JoinWindow(BEFORE, AFTER, grace=grace))
        .apply(_joiner, name="joined", queues=queues)
        # One row per result (a key's results come in processing order).
        .keyBy(lambda result: result)
        .sink("joined", name="joined-sink")
    )
    return b


def build() -> StreamBuilder:
    return pipeline()


def generate(seed: int, n: int = 60, disorder: int = 0) -> list[str]:
    """``n`` lines over keys ``a`` to ``d``, in time order but for up to ``disorder``
    ms: steps of 0 (ties), 1, the gap, the join's reach, a window's size."""
    rnd = random.Random(seed)
    steps = [0, 0, 0, 1, GAP, GAP, BEFORE + AFTER, SIZE - 1, SIZE, GAP + 1]
    out, now = [], 0
    for i in range(n):
        now += rnd.choice(steps)
        ts = max(0, now - rnd.randint(0, disorder))
        out.append(f"{rnd.choice('abcd')} {ts} {rnd.choice('LR')} {i}")
    return out


def lines() -> dict[str, list[str]]:
    """The input: a session of ``a`` ends at 6; ``b`` on another queue brings time to
    10, its close time (6 + gap) if a session closed when time reached it; ``a`` at 10
    is within the gap, so it continues that session. Then a seeded input with ties."""
    head = ["a 6 L 0", "b 10 R 1", "a 10 R 2"]
    tail = [line for line in generate(7, 200) if _ts(line) >= 10]
    return {"events": head + tail}
