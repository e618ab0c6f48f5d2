"""Uneven queues: a windowed count whose two queues hold very different input.

Keys ``b`` and ``c`` (queue 0 of the count's 2) come often and set the pace of event
time; key ``a`` (queue 1) comes rarely, each record up to 200 ms behind the others. By
the step's time (docs/windows.md, event time) many ``a`` records are late; by the time
of queue 1 alone (the largest timestamp that queue has seen) none is, since ``a`` is in
order by itself. Every backend that replays event time must give the same table and
the same late records (tests/integration/test_conformance_embedded.py,
tests/spark/test_conformance.py).
"""

from __future__ import annotations

import random

from rstreams import StreamBuilder, TumblingWindow


def build() -> StreamBuilder:
    b = StreamBuilder("uneven")
    counts = (
        b.source("events", queues=1)
        .selectTimestamp(lambda line: int(line.split()[1]))
        .keyBy(lambda line: line.split()[0])
        .window(TumblingWindow(100, grace=20), emit="close")
        .count(name="count", queues=2)
    )
    counts.toRStream().sink("counts")
    counts.late().keyBy(lambda line: line).sink("late-events")
    return b


def lines() -> dict[str, list[str]]:
    """The input, topic -> lines in order. Both queues get the last word: their final
    record comes after the input's largest timestamp, so each learns it."""
    rnd = random.Random(23)
    out, now, a_time = [], 0, 0
    for i in range(400):
        now += rnd.randint(0, 12)
        out.append(f"{'bc'[i % 2]} {now}")
        if i % 9 == 4:
            a_time = max(a_time, now - rnd.randint(0, 200))  # in order by itself
            out.append(f"a {a_time}")
    out += [f"b {now + 5}", f"a {max(a_time, now - 30)}"]
    return {"events": out}
