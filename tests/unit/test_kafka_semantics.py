"""The test driver against Kafka Streams on one partition: explicit timestamps, results
worked out by hand from Kafka Streams' processors.

- Window results carry the largest timestamp of the window's records, on every update
  and when the window closes (``KStreamWindowAggregate``: ``newTimestamp = max(record
  timestamp, stored timestamp)``, kept with the aggregate in a timestamped window store).
  A session's results carry its end (``KStreamSessionWindowAggregate``), its largest
  record timestamp.
- A joined record carries the later of its two timestamps, an unmatched left/outer one
  its own (``KStreamKStreamJoin``).
- A join record whose own window is over still joins what the other side retains; it
  is not stored (the window store drops it as expired), and an unmatched one of a
  left/outer side comes out at once.
"""

from __future__ import annotations

from rstreams import (
    HoppingWindow,
    JoinWindow,
    SessionWindow,
    StreamBuilder,
    TumblingWindow,
    Windowed,
)
from rstreams.testing import TopologyTestDriver

W = Windowed

# Out of order on purpose: a@4 is behind stream time 12 but within grace 5 of its
# window's end; a@2 comes after stream time 16, beyond grace (10 > 16 - 5 is false).
OUT_OF_ORDER = [("a", 3), ("a", 7), ("a", 12), ("a", 4), ("a", 16), ("a", 2)]


def counts(spec, emit="update"):
    b = StreamBuilder("k")
    ws = b.source("in", queues=1).keyBy(lambda v: v).window(spec, emit=emit)
    result = ws.count(name="agg", queues=1)
    result.sink("out")
    result.late().sink("late")
    return b.build()


def run(topology, records, end=False):
    with TopologyTestDriver(topology) as d:
        for value, ts in records:
            d.pipe("in", value, timestamp=ts)
        if end:
            d.end_of_input()
        out = [(r.key, r.key.closed, r.value, r.timestamp) for r in d.read("out")]
        late = [(r.value, r.timestamp) for r in d.read("late")]
        return out, late, d.metrics.get("late", 0)


def test_tumbling_updates_carry_the_windows_largest_timestamp() -> None:
    out, late, dropped = run(counts(TumblingWindow(10, grace=5)), OUT_OF_ORDER)
    assert out == [
        (W("a", 0, 10), None, 1, 3),
        (W("a", 0, 10), None, 2, 7),
        (W("a", 10, 20), None, 1, 12),
        (W("a", 0, 10), None, 3, 7),  # a@4, within grace: counted, timestamp stays 7
        (W("a", 10, 20), None, 2, 16),
    ]
    assert late == [("a", 2)] and dropped == 1


def test_tumbling_close_results_carry_the_windows_largest_timestamp() -> None:
    out, late, dropped = run(counts(TumblingWindow(10, grace=5), "close"), OUT_OF_ORDER, True)
    assert out == [
        (W("a", 0, 10), "event-time", 3, 7),  # closes at stream time 16 >= 10 + 5
        (W("a", 10, 20), "end-of-input", 2, 16),
    ]
    assert late == [("a", 2)] and dropped == 1


def test_hopping_windows_each_keep_their_own_largest_timestamp() -> None:
    records = [("a", 7), ("a", 3), ("a", 12), ("a", 6)]
    out, late, _ = run(counts(HoppingWindow(10, 5, grace=10)), records)
    assert out == [
        (W("a", 0, 10), None, 1, 7),
        (W("a", 5, 15), None, 1, 7),
        (W("a", 0, 10), None, 2, 7),  # a@3: [0, 10) only (no window starts below 0)
        (W("a", 5, 15), None, 2, 12),
        (W("a", 10, 20), None, 1, 12),
        (W("a", 0, 10), None, 3, 7),  # a@6: 7 is still [0, 10)'s largest
        (W("a", 5, 15), None, 3, 12),
    ]
    assert late == []


def test_session_results_carry_the_session_end() -> None:
    records = [("a", 1), ("a", 9), ("a", 5)]
    out, _, _ = run(counts(SessionWindow(4, grace=20)), records)
    assert out == [
        (W("a", 1, 1), None, 1, 1),
        (W("a", 9, 9), None, 1, 9),
        (W("a", 1, 1), None, None, 1),  # a@5 bridges them; merged away: its own end
        (W("a", 9, 9), None, None, 9),
        (W("a", 1, 9), None, 3, 9),  # out of order: the end, 9, not 5
    ]
    out, _, _ = run(counts(SessionWindow(4), "close"), [("a", 1), ("a", 4), ("a", 2), ("a", 20)])
    assert out[0] == (W("a", 1, 4), "event-time", 3, 4)


# -- joins ----------------------------------------------------------------------------------


def join(kind):
    b = StreamBuilder("kj")
    left, right = b.source("orders", queues=1), b.source("payments", queues=1)
    (
        getattr(left, kind)(right)
        .where(lambda v: v.split(":")[0])
        .equalTo(lambda v: v.split(":")[0])
        .window(JoinWindow(before=10, after=10))  # grace 0: stores retain 20 ms
        .apply(lambda o, p: f"{o}|{p}", name="j", queues=1)
        .sink("out")
    )
    return b.build()


# Stream time reaches 150 first. o1@140 is buffered (140 + 10 < 150 is false). p@130 is
# late (130 + 10 < 150), yet joins o1, which the left side still retains (140 in
# [130 - 10, 130 + 10]); it is not buffered, so o2@140, not late, finds no payment.
LATE_JOIN = [
    ("payments", "2:q", 150),
    ("orders", "1:o1", 140),
    ("payments", "1:p", 130),
    ("orders", "1:o2", 140),
]


def pipe_join(topology, records, end=False):
    with TopologyTestDriver(topology) as d:
        for topic, value, ts in records:
            d.pipe(topic, value, timestamp=ts)
        if end:
            d.end_of_input()
        return [(r.key, r.value, r.timestamp) for r in d.read("out")], d.metrics.get("late", 0)


def test_a_late_join_record_joins_what_the_other_side_retains() -> None:
    out, late = pipe_join(join("join"), LATE_JOIN)
    assert out == [("1", "1:o1|1:p", 140)]  # max(140, 130)
    assert late == 1


def test_a_late_join_record_is_not_buffered_and_marks_what_it_matched() -> None:
    records = [*LATE_JOIN, ("payments", "3:z", 200)]  # stream time 200: all expire
    out, late = pipe_join(join("leftJoin"), records)
    # o1 was matched by the late p: no unmatched result for it; o2 found nothing.
    assert out == [("1", "1:o1|1:p", 140), ("1", "1:o2|None", 140)]
    assert late == 1


def test_an_unmatched_late_record_of_an_outer_side_comes_out_at_once() -> None:
    records = [
        ("payments", "2:q", 150),
        ("orders", "4:o4", 100),  # late, nothing to join: (o4, None) now, timestamp 100
        ("payments", "5:r", 120),  # late too: inner/left drop it, outer emits (None, r)
    ]
    out, late = pipe_join(join("leftJoin"), records)
    assert out == [("4", "4:o4|None", 100)] and late == 2
    out, late = pipe_join(join("outerJoin"), records, end=True)
    assert out == [
        ("4", "4:o4|None", 100),
        ("5", "None|5:r", 120),
        ("2", "None|2:q", 150),  # at the end of input
    ]
    assert late == 2
    out, late = pipe_join(join("join"), records)
    assert out == [] and late == 2
