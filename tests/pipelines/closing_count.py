"""What closes before the end: a windowed count after a keyBy into three queues.

Keys ``a`` to ``f`` spread over the count's 3 queues; each key stops at its own time,
so some queues get their last record long before the input ends. By the step's time
(docs/windows.md, event time: the time the one input, a file read in order, has
reached) a window closes as soon as that time passes its end + grace, whatever queue it
is on and whether that queue gets another record: every window the input's largest
timestamp has passed closes by event time (``closed="event-time"``), before the end of
the input; only the later ones close at its end (``"end-of-input"``). Every backend
must close the same windows before the end (tests/integration/test_conformance_embedded.py,
tests/spark/test_conformance.py).
"""

from __future__ import annotations

from rstreams import StreamBuilder, TumblingWindow


def build() -> StreamBuilder:
    b = StreamBuilder("closing")
    (
        b.source("events", queues=1)
        .selectTimestamp(lambda line: int(line.split()[1]))
        .keyBy(lambda line: line.split()[0])
        .window(TumblingWindow(100, grace=10), emit="close")
        .count(name="count", queues=3)
        .toRStream()
        .sink("counts")
    )
    return b


def lines() -> dict[str, list[str]]:
    """The input, in time order: key i of ``abcdef`` stops after ``150 * (i + 1)`` ms."""
    out = []
    for t in range(0, 1000, 7):
        for i, key in enumerate("abcdef"):
            if t < 150 * (i + 1):
                out.append(f"{key} {t}")
    return {"events": out}


def labelled(table: dict) -> list[tuple[str, int, str | None, int]]:
    """A table of the count as ``(key, window start, closed, count)``, sorted."""
    return sorted((w.key, w.start, w.closed, n) for w, n in table.items())


def expected() -> list[tuple[str, int, str | None, int]]:
    """Worked out from the input: a window closes by event time when the input's
    largest timestamp is at least its end + grace, else at the end of the input."""
    times = [(line.split()[0], int(line.split()[1])) for line in lines()["events"]]
    top = max(t for _, t in times)
    counts: dict[tuple[str, int], int] = {}
    for key, t in times:
        counts[(key, t - t % 100)] = counts.get((key, t - t % 100), 0) + 1
    return sorted(
        (key, start, "event-time" if start + 100 + 10 <= top else "end-of-input", n)
        for (key, start), n in counts.items()
    )
