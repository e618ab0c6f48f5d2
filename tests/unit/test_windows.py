"""Windows and joins on the test driver: explicit inputs, hand-computed outputs.

Every pipeline uses one queue end to end, so stream time is the same for all keys.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from rstreams import (
    HoppingWindow,
    JoinWindow,
    SessionWindow,
    SlidingWindow,
    StreamBuilder,
    TumblingWindow,
    Windowed,
)
from rstreams.testing import TopologyTestDriver

W = Windowed


def windowed(spec, *, op="count", emit="update", idle=None, **agg):
    b = StreamBuilder("w")
    grouped = b.source("in", queues=1).keyBy(lambda v: v.split(":")[0])
    ws = grouped.window(spec, emit=emit, close_after_idle=idle)
    if op == "count":
        result = ws.count(name="agg", queues=1)
    else:
        result = ws.sum(lambda v: int(v.split(":")[1]), name="agg", queues=1)
    result.sink("out")
    result.late().sink("late")
    return b.build()


def run(topology, records, advance=0):
    with TopologyTestDriver(topology) as d:
        for value, ts in records:
            d.pipe("in", value, timestamp=ts)
        if advance:
            d.advance_time(advance)
        out = [(r.key, r.value, r.timestamp) for r in d.read("out")]
        late = [(r.value, r.timestamp) for r in d.read("late")]
        state = d.state("w-agg-store")
    return out, late, state


def test_tumbling_update_with_grace_and_late_records() -> None:
    records = [("a", 1), ("a", 5), ("b", 12), ("a", 11), ("a", 3), ("a", 30), ("a", 2)]
    out, late, state = run(windowed(TumblingWindow(10, grace=5)), records)
    assert out == [
        (W("a", 0, 10), 1, 1),
        (W("a", 0, 10), 2, 5),
        (W("b", 10, 20), 1, 12),
        (W("a", 10, 20), 1, 11),
        # Out of order but within grace (10 > 12 - 5): counted; the result carries the
        # window's largest record timestamp, 5, as in Kafka Streams.
        (W("a", 0, 10), 3, 5),
        (W("a", 30, 40), 1, 30),
    ]
    assert late == [("a", 2)]  # 10 > 30 - 5 is false: late, to the side output
    # Windows whose end + grace stream time passed are gone from the store; an open one
    # keeps (aggregate, largest record timestamp).
    assert state == {("t",): 30, ("w", "a", 30): (1, 30)}


def test_tumbling_close_emits_once_when_stream_time_passes_end_plus_grace() -> None:
    records = [("a", 1), ("a", 5), ("b", 9), ("a", 12), ("a", 14), ("b", 16), ("a", 26)]
    out, late, _ = run(windowed(TumblingWindow(10, grace=2), emit="close"), records)
    assert [(k, k.closed, v, ts) for k, v, ts in out] == [
        # at stream time 12 = 10 + 2; each with its largest record timestamp
        (W("a", 0, 10), "event-time", 2, 5),
        (W("b", 0, 10), "event-time", 1, 9),
        (W("a", 10, 20), "event-time", 2, 14),  # at 26 >= 22
        (W("b", 10, 20), "event-time", 1, 16),
    ]
    assert late == []


def test_close_after_idle_closes_windows_by_wall_clock() -> None:
    topology = windowed(TumblingWindow(timedelta(seconds=1)), emit="close", idle=100)
    out, _, state = run(topology, [("a", 100), ("b", 200)], advance=100)
    assert [(k, k.closed, v) for k, v, _ in out] == [
        (W("a", 0, 1000), "idle", 1),
        (W("b", 0, 1000), "idle", 1),
    ]
    assert state == {("t",): 200}


def test_hopping_windows_overlap_and_start_at_zero() -> None:
    out, _, _ = run(windowed(HoppingWindow(10, 5), op="sum"), [("a:1", 3), ("a:10", 7)])
    assert out == [
        (W("a", 0, 10), 1, 3),
        (W("a", 0, 10), 11, 7),
        (W("a", 5, 15), 10, 7),
    ]
    assert SlidingWindow(10, 5) == HoppingWindow(10, 5)


def test_hopping_late_for_some_windows_still_counts_in_the_live_ones() -> None:
    out, late, _ = run(windowed(HoppingWindow(10, 5)), [("a", 20), ("a", 8)])
    # a@8 belongs to [0,10) (ends 10 <= 20: closed) and [5,15) (closed too): late.
    assert late == [("a", 8)]
    out, late, _ = run(windowed(HoppingWindow(10, 5), emit="update"), [("a", 12), ("a", 8)])
    # a@8: [0,10) closed (10 <= 12) but [5,15) is live: it counts there, not late (the
    # result keeps the window's largest timestamp, 12).
    assert out[-1] == (W("a", 5, 15), 2, 12) and late == []


def test_session_windows_merge_and_emit_tombstones_for_merged_sessions() -> None:
    spec = SessionWindow(5, grace=10)
    out, late, state = run(windowed(spec), [("a", 1), ("a", 10), ("a", 5), ("a", 40)])
    assert out == [
        (W("a", 1, 1), 1, 1),
        (W("a", 10, 10), 1, 10),
        # merged into [1, 10]; a session's results carry its end (Kafka Streams')
        (W("a", 1, 1), None, 1),
        (W("a", 10, 10), None, 10),
        (W("a", 1, 10), 3, 10),
        (W("a", 40, 40), 1, 40),
    ]
    assert late == []
    assert state == {("t",): 40, ("s", "a", 40): (40, 1)}  # [1,10] expired at 10+5+10


def test_session_close_mode_and_sum_merge() -> None:
    topology = windowed(SessionWindow(5), op="sum", emit="close")
    out, _, _ = run(topology, [("a:1", 1), ("a:2", 4), ("a:4", 20)])
    assert [(k, v) for k, v, _ in out] == [(W("a", 1, 4), 3)]  # closed at 20 > 4 + 5


def test_aggregate_over_tumbling_windows_needs_no_merger() -> None:
    b = StreamBuilder("w")
    ws = b.source("in", queues=1).keyBy(lambda v: v[0]).window(TumblingWindow(10))
    ws.aggregate(list, lambda acc, v: [*acc, v], name="agg", queues=1).sink("out")
    with TopologyTestDriver(b.build()) as d:
        for value, ts in [("a1", 1), ("a2", 4), ("a3", 12)]:
            d.pipe("in", value, timestamp=ts)
        assert d.read_table("out") == {W("a", 0, 10): ["a1", "a2"], W("a", 10, 20): ["a3"]}


def test_windowed_keys_round_trip_through_json_sinks() -> None:
    out, _, _ = run(windowed(TumblingWindow(10)), [("x", 1)])
    ((key, _, _),) = out
    assert isinstance(key, Windowed) and key.key == "x"


# -- joins ----------------------------------------------------------------------------------


JOIN_WINDOW = JoinWindow(before=5, after=10)


def join(kind="join", window=JOIN_WINDOW):
    b = StreamBuilder("j")
    left = b.source("orders", queues=1)
    right = b.source("payments", queues=1)
    joined = (
        getattr(left, kind)(right)
        .where(lambda v: v.split(":")[0])
        .equalTo(lambda v: v.split(":")[0])
    )
    if window is not None:
        joined = joined.window(window)
    joined.apply(lambda o, p: f"{o}|{p}", name="j", queues=1).sink("out")
    return b.build()


def pipe_join(topology, records):
    with TopologyTestDriver(topology) as d:
        for topic, value, ts in records:
            d.pipe(topic, value, timestamp=ts)
        return [(r.key, r.value, r.timestamp) for r in d.read("out")]


JOIN_INPUT = [
    ("orders", "1:o1", 100),
    ("payments", "1:p1", 108),  # 108 in [100 - 5, 100 + 10]: joins o1
    ("payments", "2:p2", 110),
    ("orders", "2:o2", 104),  # out of order; p2 at 110 in [104 - 5, 104 + 10]: joins
    ("payments", "1:p3", 120),  # 120 > 100 + 10: no match for o1
    ("orders", "3:o3", 121),  # never paid
    ("payments", "4:p4", 125),  # never ordered
    ("orders", "9:o9", 200),  # moves stream time: everything above expires
]


def test_inner_windowed_join() -> None:
    assert pipe_join(join("join"), JOIN_INPUT) == [
        ("1", "1:o1|1:p1", 108),
        ("2", "2:o2|2:p2", 110),
    ]


def test_left_windowed_join_emits_unmatched_left_once_its_window_closed() -> None:
    assert pipe_join(join("leftJoin"), JOIN_INPUT) == [
        ("1", "1:o1|1:p1", 108),
        ("2", "2:o2|2:p2", 110),
        ("3", "3:o3|None", 121),  # after stream time 200 > 121 + 5 + 10
    ]


def test_outer_windowed_join_also_emits_unmatched_right() -> None:
    out = pipe_join(join("outerJoin"), JOIN_INPUT)
    assert out == [
        ("1", "1:o1|1:p1", 108),
        ("2", "2:o2|2:p2", 110),
        ("1", "None|1:p3", 120),
        ("3", "3:o3|None", 121),
        ("4", "None|4:p4", 125),
    ]


def test_late_join_records_are_counted_not_joined() -> None:
    topology = join("join", JoinWindow(before=0, after=5))
    with TopologyTestDriver(topology) as d:
        d.pipe("orders", "1:o", timestamp=100)
        d.pipe("payments", "1:p", timestamp=50)  # 50 + 0 < 100: late
        assert d.read("out") == []
        assert d.metrics["late"] == 1


def test_join_without_window_meets_the_version_as_of_its_time_valid_for_ttl() -> None:
    b = StreamBuilder("t")
    left, right = b.source("l", queues=1), b.source("r", queues=1)
    (
        left.leftJoin(right)
        .where(lambda v: v[0])
        .equalTo(lambda v: v[0])
        .apply(lambda a, c: (a, c), name="j", ttl=50, queues=1)
        .sink("out")
    )
    with TopologyTestDriver(b.build()) as d:
        d.pipe("l", "a1", timestamp=0)
        d.pipe("r", "a2", timestamp=10)
        d.pipe("l", "a3", timestamp=20)
        d.pipe("r", "b1", timestamp=100)
        d.pipe("l", "a4", timestamp=101)
        before_end = [r.value for r in d.read("out")]
        d.end_of_input()
        out = before_end + [r.value for r in d.read("out")]
    # left join: a1 meets no version -> (a1, None); a2 meets the left version as of 10
    # (a1); a3 meets a2; b1 alone on the right emits nothing; a4 (at 101) finds a2 no
    # longer valid (10 + ttl 50 < 101). a4 waits for stream time to pass 101: the end.
    assert before_end == [["a1", None], ["a1", "a2"], ["a3", "a2"]]
    assert out == [["a1", None], ["a1", "a2"], ["a3", "a2"], ["a4", None]]


def test_join_sides_share_one_shuffle_topic() -> None:
    topology = join("join")
    shuffles = [t for t in topology.topics.values() if t.role == "shuffle"]
    assert [t.name for t in shuffles] == ["j-j-shuffle"]
    sinks = [f for f in topology.factories.values() if f.kind == "shuffle-sink"]
    assert {f.topic for f in sinks} == {"j-j-shuffle"} and len(sinks) == 2


@pytest.mark.parametrize("bad", [0, -5, "10"])
def test_bad_window_sizes(bad) -> None:
    from rstreams import TopologyError

    with pytest.raises(TopologyError):
        TumblingWindow(bad)
