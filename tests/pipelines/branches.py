"""Branches: one source task feeds two windowed counts, each through its own shuffle.

Lines ``key timestamp branch`` (branch ``A`` or ``B``) are filtered into two branches,
each keyed and counted in tumbling windows emitting on close, with their late records
in a sink of their own. Each count's shuffle has one producer, the source task, so it
is *told* that producer's time (rstreams/semantics/clock.py): the time the producer sent
to that step, not what it sent to the other (docs/windows.md, event time). Branch ``B``
lags: its records stop at 20 while ``A`` goes on to 100, then ``B`` resumes in order by
itself. None of ``B``'s records is late by ``B``'s own time; by ``A``'s, those that come
after ``A`` passed 30 would be. A restart between the two must not change that
(tests/integration/test_told_restore.py).
"""

from __future__ import annotations

from rstreams import StreamBuilder, TumblingWindow

#: The windows' size (ms).
SIZE = 10


def _ts(line: str) -> int:
    return int(line.split()[1])


def _branch(line: str) -> str:
    return line.split()[2]


def _key(line: str) -> str:
    return line.split()[0]


def pipeline(queues: int = 2, grace: int = 0) -> StreamBuilder:
    """Two counts over the branches of ``events``, each with ``queues`` queues."""
    b = StreamBuilder("branches")
    events = b.source("events", queues=1).selectTimestamp(_ts)
    for name in ("A", "B"):
        step = name.lower()
        counts = (
            events.filter(lambda line, name=name: _branch(line) == name)
            .keyBy(_key)
            .window(TumblingWindow(SIZE, grace=grace), emit="close")
            .count(name=step, queues=queues)
        )
        counts.toRStream().sink(step, name=f"{step}-sink")
        counts.late().keyBy(lambda line: line).sink(f"late-{step}", name=f"late-{step}-sink")
    return b


def build() -> StreamBuilder:
    return pipeline()


#: Where a restart cuts :func:`lines`: after ``A`` got to 100, before ``B`` resumes.
CUT = 6


def lines() -> dict[str, list[str]]:
    """``B`` up to 20, ``A`` up to 100, then ``B`` from 21 on (in order by itself)."""
    head = ["x 5 B", "y 12 B", "x 20 B", "x 40 A", "y 70 A", "x 100 A"]
    tail = ["x 21 B", "y 25 B", "x 33 B", "y 104 A"]
    assert len(head) == CUT
    return {"events": head + tail}
