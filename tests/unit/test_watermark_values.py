"""Watermarks through shuffles: the values themselves (see the watermarks module)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams import StreamBuilder, TumblingWindow
from rstreams.planner.topology import Topology
from rstreams.runtime.engine.coordination.local import LocalEngine
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.operators.watermarks import (
    END,
    NO_TIME,
    InputWatermarks,
    decode_control,
    encode_control,
    producers_of,
    send_told,
    told_slack,
)
from rstreams.runtime.engine.tasks.task import RESEND_WATERMARK_MS, Task
from rstreams.runtime.queues.memory import MemoryBroker
from rstreams.semantics.clock import ClockPlan, StepClock


def test_the_input_watermark_is_the_minimum_over_producers() -> None:
    marks = InputWatermarks([(0, 0), (0, 1), (1, 0)])
    assert marks.value == NO_TIME  # nothing heard from anyone yet
    assert not marks.update((0, 0), 50, False)
    assert not marks.update((0, 1), 70, False)
    assert marks.update((1, 0), 60, False)
    assert marks.value == 50
    assert not marks.update((0, 0), 40, False)  # a restarted producer: never backwards
    assert marks.update((0, 0), 90, False) and marks.value == 60


def test_end_of_input_and_idle_producers_stop_holding_it_back() -> None:
    marks = InputWatermarks([(0, 0), (0, 1)])
    marks.update((0, 0), 10, False)
    marks.update((0, 1), END, False)
    assert marks.value == 10
    marks.update((0, 0), 10, True)  # idle: left out of the minimum
    # Nobody holds time back: the largest watermark received short of END.
    assert marks.value == 10
    marks.update((0, 0), 30, False)  # data again
    assert marks.value == 30
    marks.update((0, 0), END, False)
    assert marks.value == 30
    assert not marks.update((5, 5), 99, False)  # not a producer of this input
    assert InputWatermarks([]).value == END


def test_a_producers_watermark_on_one_topic_does_not_count_for_another() -> None:
    # Producers (0, 0) and (0, 1) write shuffles "x" and "y", both read by one task. It
    # reads x's records and marks, then y's: a mark read on x says nothing of the
    # records on y before that producer's mark there, not read yet.
    marks = InputWatermarks([(t, p) for t in "xy" for p in [(0, 0), (0, 1)]])
    assert not marks.update((0, 0), 50, False, topic="x")
    assert not marks.update((0, 1), 70, False, topic="x")
    assert marks.value == NO_TIME  # nothing read of y
    assert not marks.update((0, 0), 50, False, topic="y")
    assert marks.update((0, 1), 20, False, topic="y")
    assert marks.value == 20  # (0, 1) on y: 20, whatever it said on x
    assert marks.update((0, 1), 70, False, topic="y") and marks.value == 50
    marks.update((0, 0), 90, True, topic="x")  # idle on x: still 50 on y
    assert marks.value == 50
    assert not marks.update((0, 0), 99, False)  # not on a topic of this task


def test_a_told_input_tells_a_batch_of_times_at_once_as_one_by_one() -> None:
    # Spark's replay tells a queue's clock a micro-batch of its producer's times in one
    # call: the time reached after each is the largest told so far, across calls.
    one = StepClock(ClockPlan((0, 0), ("t",), told=("t",)), 0)
    assert one.told_each("t", [5, 3, 9, 7]) == [5, 5, 9, 9]
    assert one.told_each("t", [8, 12]) == [9, 12]
    assert one.told_each("t", []) == [] and one.told_time == 12
    assert one.told("t", 10) == 10 and one.told_time == 12  # (the caller keeps its largest)
    # Several told inputs (a join of two topics): their minimum once each has told one.
    two = StepClock(ClockPlan((0, 0), ("a", "b"), told=("a", "b")), 0)
    assert two.told_each("a", [4, 20]) == [NO_TIME, NO_TIME]
    assert two.told_each("b", [6, 30]) == [6, 20]
    assert two.told("a", 25) == 25 and two.told_time == 25


def test_control_records_round_trip() -> None:
    assert decode_control(encode_control((2, 7), END, True, 5)) == ((2, 7), END, True, 5, None)
    assert decode_control(encode_control((0, 0), 3, False)) == ((0, 0), 3, False, NO_TIME, None)


def test_a_consumer_that_lost_the_watermarks_learns_where_time_got_from_an_end() -> None:
    # Restarted after the end of input: the producers' resent END carries the largest
    # watermark each sent before it.
    marks = InputWatermarks([(0, 0), (0, 1)])
    marks.update((0, 0), END, False, 250)
    assert marks.value == NO_TIME
    marks.update((0, 1), END, False, 260)
    assert marks.value == 260


def window_count(source_queues: int, queues: int) -> Topology:
    b = StreamBuilder("wm")
    (
        b.source("in", queues=source_queues)
        .selectTimestamp(lambda v: int(v.split()[1]))
        .keyBy(lambda v: v.split()[0])
        .window(TumblingWindow(100, grace=0), emit="close")
        .count(name="agg", queues=queues)
        .toRStream()
        .sink("out")
    )
    return b.build()


def feed(engine: LocalEngine, queue: int, *records: tuple[str, int]) -> None:
    engine.producer.send_many(
        "in", queue, [(0, None, f"{k} {ts}".encode(), ()) for k, ts in records]
    )
    engine.producer.flush()
    engine.run_until_idle()


def downstream(engine: LocalEngine) -> list[Task]:
    return [t for t in engine.tasks if t.sub.id == 1]


def test_a_shuffle_with_several_producers_carries_their_minimum() -> None:
    topology = window_count(source_queues=2, queues=3)
    broker = MemoryBroker()
    engine = LocalEngine(topology, broker, EngineConfig())
    shuffle = "wm-agg-shuffle"
    assert producers_of(topology, shuffle, broker.queue_count) == [(0, 0), (0, 1)]
    feed(engine, 0, ("a", 10), ("b", 120), ("c", 250))
    # Queue 1 said nothing yet: every consumer still waits for it.
    assert [t.ctx.watermark for t in downstream(engine)] == [NO_TIME] * 3
    assert engine.tasks[0].watermark == 250
    feed(engine, 1, ("a", 30), ("d", 140))
    assert [t.ctx.watermark for t in downstream(engine)] == [140] * 3
    # Window [0, 100) of a is closed (whichever queue holds it); [100, 200) waits for
    # the slower producer.
    (closed,) = broker.read("out", 0, 0, 100)
    assert (closed.key, closed.value) == (b'{"@windowed":["a",0,100],"closed":"event-time"}', b"2")
    feed(engine, 1, ("d", 260))
    assert [t.ctx.watermark for t in downstream(engine)] == [250] * 3
    # Control records are in every shuffle queue, after the records they follow.
    for q in range(3):
        controls = [
            decode_control(r.value) for r in broker.read(shuffle, q, 0, 100) if r.key is None
        ]
        assert controls[-1] == ((0, 1), 260, False, 260, None)
    engine.end_of_input()
    # All producers ended: the largest watermark any sent (the input's last timestamp).
    assert [t.ctx.watermark for t in downstream(engine)] == [260] * 3


def test_one_producer_tells_every_queue_its_time_after_a_batch() -> None:
    # No watermark (one producer): after each batch, every queue of the shuffle is told
    # the producer's time, so a queue whose records stopped (a@10) still closes what that
    # time passed, before the end of input, as the driver and Spark do.
    broker = MemoryBroker()
    engine = LocalEngine(window_count(source_queues=1, queues=2), broker, EngineConfig())
    feed(engine, 0, ("a", 10), ("b", 120))

    def last_told() -> list[int]:
        queues = [broker.read("wm-agg-shuffle", q, 0, 100)[-1] for q in range(2)]
        assert all(r.key is None for r in queues)
        return [decode_control(r.value).watermark for r in queues]

    assert last_told() == [120, 120]
    closed = [r.key for r in broker.read("out", 0, 0, 100)]
    assert closed == [b'{"@windowed":["a",0,100],"closed":"event-time"}']
    engine.end_of_input()
    assert last_told() == [120, 120]  # (nothing new to tell)
    assert [t.ctx.watermark for t in downstream(engine)] == [END, END]


@pytest.mark.parametrize("batch_size", [1, 2, 1000])
@pytest.mark.parametrize("cut", [None, 3])
def test_one_producer_tells_a_queue_its_time_before_a_record_behind_it(
    batch_size: int, cut: int | None
) -> None:
    # "a" and "b" go to different queues of 2. b@500 moves the producer's time; a@30,
    # in order in its own queue, is behind it: that queue is told 500 first, so [0, 100)
    # of "a" closes by event time and a@30 is late, whatever the batches and wherever
    # a restart falls (at least once: the producer keeps its time with its commit).
    records = [("a", 10), ("a", 20), ("b", 500), ("a", 30), ("b", 510)]
    broker = MemoryBroker()
    late = 0
    for part in [records] if cut is None else [records[:cut], records[cut:]]:
        engine = LocalEngine(window_count(1, 2), broker, EngineConfig(batch_size=batch_size))
        feed(engine, 0, *part)
        late += engine.metrics().get("late", 0)
        engine.close()
    assert late == 1
    out = [(r.key, r.value) for r in broker.read("out", 0, 0, 100)]
    assert (b'{"@windowed":["a",0,100],"closed":"event-time"}', b"2") in out
    # The queue of "a" is told 500 right before a@30 (and after batches, what they end at).
    queue = broker.read("wm-agg-shuffle", 1, 0)
    (at,) = [i for i, r in enumerate(queue) if r.key is not None and r.timestamp == 30]
    assert queue[at - 1].key is None and decode_control(queue[at - 1].value).watermark == 500


def test_send_told_tells_the_chosen_queue_of_each_record_behind_before_sending_it() -> None:
    # Records 2 and 4 are behind the time before them (500, then 500 still): each is
    # sent after its own queue (chosen before, here queues[i]) is told that time.
    queues = [0, 1, 1, 0, 1]
    steps: list[tuple[str, object]] = []
    top = send_told(
        [100, 500, 30, 510, 40],
        90,
        lambda start, stop: steps.append(("send", queues[start:stop])),
        lambda q, time: steps.append(("tell", (q, time))),
        queues=queues,
    )
    assert top == 510
    assert steps == [
        ("send", [0, 1]),
        ("tell", (1, 500)),
        ("send", [1, 0]),
        ("tell", (1, 510)),
        ("send", [1]),
    ]
    # Records in order: sent whole, nobody told.
    steps.clear()
    assert send_told([5, 7], 0, lambda a, b: steps.append(("send", (a, b))), print) == 7
    assert steps == [("send", (0, 2))]


def test_send_told_sends_records_behind_by_slack_or_less_whole_and_tells_after() -> None:
    # slack 100: 450 (50 behind) goes with the others, and its queue 1, which no later
    # record brings to 500, is told 500 after the batch; 30 (470 behind) is told first;
    # queue 0's 480 is followed by 510 on queue 0, which carries its time itself.
    queues = [0, 1, 1, 0, 0, 1]
    steps: list[tuple[str, object]] = []
    top = send_told(
        [100, 500, 450, 480, 510, 30],
        90,
        lambda start, stop: steps.append(("send", queues[start:stop])),
        lambda q, time: steps.append(("tell", (q, time))),
        slack=100,
        queues=queues,
    )
    assert top == 510
    assert steps == [
        ("send", [0, 1, 1, 0, 0]),
        ("tell", (1, 510)),
        ("send", [1]),
    ]
    steps.clear()
    send_told([100, 500, 450], 90, lambda a, b: steps.append(("send", (a, b))),
              lambda q, time: steps.append(("tell", (q, time))), slack=100, queues=3)  # fmt: skip
    assert steps == [("send", (0, 3)), ("tell", (3, 500))]


def test_told_slack_is_the_grace_of_the_window_reading_the_shuffle() -> None:
    from rstreams import HoppingWindow, SessionWindow, StreamBuilder

    def slack(window: object) -> int:
        b = StreamBuilder("s")
        b.source("in").keyBy(lambda v: v).window(window).count().sink("out")
        t = b.build()
        (topic,) = [x for x in t.topics if x.endswith("shuffle")]
        return told_slack(t, topic)

    assert slack(HoppingWindow(10, 2, grace=7)) == 7
    assert slack(SessionWindow(10, grace=7)) == 7  # (closes once time passes end + gap + grace)
    assert slack(SessionWindow(10)) == 0


def test_an_idle_source_queue_stops_holding_the_watermark_back() -> None:
    now = [0]
    engine = LocalEngine(
        window_count(source_queues=2, queues=1),
        MemoryBroker(),
        EngineConfig(source_idle_ms=1000),
        clock=lambda: now[0],
    )
    feed(engine, 0, ("a", 10), ("b", 120))
    (task,) = downstream(engine)
    assert task.ctx.watermark == NO_TIME
    now[0] = 500
    for t in engine.tasks:
        t.punctuate(now[0])
    engine.run_until_idle()
    assert task.ctx.watermark == NO_TIME  # not idle for long enough yet
    now[0] = 1000
    for t in engine.tasks:
        t.punctuate(now[0])
    engine.run_until_idle()
    # Queue 1 never had data: idle now (so is queue 0, which has nothing new either);
    # with every producer idle, the largest watermark received.
    assert task.ctx.watermark == 120
    feed(engine, 1, ("c", 130))
    assert task.ctx.watermark == 130  # queue 1 is back; queue 0 is still idle


@settings(max_examples=25, deadline=None)
@given(
    gaps=st.lists(st.integers(0, 60), min_size=40, max_size=120),
    keys=st.lists(st.sampled_from("abc"), min_size=120, max_size=120),
    source_queues=st.sampled_from([1, 2, 4]),
    queues=st.sampled_from([1, 3]),
    chunk=st.integers(1, 10),
    batch=st.integers(1, 50),
)
def test_in_order_input_gives_the_same_windows_whatever_the_queues(
    gaps: list[int], keys: list[str], source_queues: int, queues: int, chunk: int, batch: int
) -> None:
    # In-order input dealt to the source queues chunk by chunk (each queue in order),
    # then processed (one queue after the other, in batches): every window counts all
    # its records and closes on time unless the input's last timestamp did not reach
    # its end.
    stamps = list(itertools.accumulate(gaps))
    records = list(zip(keys, stamps))
    config = EngineConfig(batch_size=batch)
    engine = LocalEngine(window_count(source_queues, queues), MemoryBroker(), config)
    for n, i in enumerate(range(0, len(records), chunk)):
        rows = [(0, None, f"{k} {ts}".encode(), ()) for k, ts in records[i : i + chunk]]
        engine.broker.append("in", n % source_queues, rows)
    engine.run_until_idle()
    engine.end_of_input()
    got = {
        r.key: r.value
        for q in range(engine.queue_counts["out"])
        for r in engine.broker.read("out", q, 0, 10_000)
    }
    counts = Counter((k, ts // 100 * 100) for k, ts in records)
    last = stamps[-1]
    expected = {
        json.dumps(
            {
                "@windowed": [k, s, s + 100],
                "closed": "event-time" if s + 100 <= last else "end-of-input",
            },
            separators=(",", ":"),
        ).encode(): str(n).encode()
        for (k, s), n in counts.items()
    }
    assert got == expected
    assert engine.metrics().get("late", 0) == 0


class QueuesProbe:
    """Source queues' ends and the ingest's records of them, as a consumer sees them."""

    def __init__(self) -> None:
        self.ends: dict[tuple[str, int], int] = {}
        self.ingest: dict[tuple[str, int], int] = {}

    def at_end(self, queries) -> list[bool]:  # type: ignore[no-untyped-def]
        return [
            all(self.ends.get((t, queue), 0) == pos for t, pos in positions)
            for queue, positions in queries
        ]

    def ingest_ended(self, caught_up) -> bool:  # type: ignore[no-untyped-def]
        return all(self.ingest.get((t, q)) == pos for q, ps in caught_up for t, pos in ps)


def test_a_caught_up_producer_holds_nothing_back_while_its_queue_ends_there() -> None:
    probe = QueuesProbe()
    marks = InputWatermarks([(0, 0), (0, 1), (0, 2)], probe)
    probe.ends[("in", 0)] = 5
    marks.update((0, 0), 100, False)
    marks.update((0, 1), 80, False)
    assert marks.value == NO_TIME  # queue 2 has said nothing yet
    # Queue 2 read all it holds (nothing): out of the minimum, at once.
    assert marks.update((0, 2), NO_TIME, True, caught_up=(("in", 0),))
    assert marks.value == 80
    # Its queue grew: it holds time back again (where it got; never backwards) ...
    probe.ends[("in", 2)] = 3
    marks.update((0, 1), 90, False)
    assert marks.value == 80
    marks.update((0, 1), 120, False)
    assert marks.value == 80
    # ... until it has read that too.
    marks.update((0, 2), 95, False)
    assert marks.value == 95
    # Read to the end again: the others' minimum.
    marks.update((0, 2), 95, True, caught_up=(("in", 3),))
    assert marks.value == 100


def test_an_input_read_to_its_end_stops_holding_time_back() -> None:
    probe = QueuesProbe()
    # Two inputs: sub-topology 0 reads "a" (2 queues), sub-topology 1 reads "b" (1 queue).
    marks = InputWatermarks([(0, 0), (0, 1), (1, 0)], probe)
    probe.ends.update({("a", 0): 10, ("a", 1): 0, ("b", 0): 4})
    marks.update((1, 0), 500, False)
    marks.update((0, 0), 300, True, caught_up=(("a", 10),))
    marks.update((0, 1), NO_TIME, True, caught_up=(("a", 0),))
    # Every queue of "a" read, but its file not yet read to its end: "a" got to 300.
    assert marks.value == 300
    # The ingest reached the end of "a"'s file where the queues end: "a" holds nothing.
    probe.ingest.update({("a", 0): 10, ("a", 1): 0})
    assert marks.refresh() and marks.value == 500
    # Both inputs read to their ends: the largest watermark any producer sent.
    probe.ingest[("b", 0)] = 4
    marks.update((1, 0), 600, True, caught_up=(("b", 4),))
    assert marks.value == 600
    # More of "a" ingested (its file grew): it is not at its end any more, but time
    # does not go back.
    probe.ends[("a", 1)] = 2
    assert not marks.refresh() and marks.value == 600


def test_an_end_of_queue_never_recorded_by_the_ingest_is_not_an_end() -> None:
    probe = QueuesProbe()
    marks = InputWatermarks([(0, 0), (0, 1), (1, 0)], probe)
    probe.ends[("a", 0)] = 3
    marks.update((1, 0), 500, False)
    # Queue 1 of "a" is empty and the ingest has recorded nothing of it (it may still be
    # reading the file): "a" still holds time back, where it got.
    marks.update((0, 0), 200, True, caught_up=(("a", 3),))
    marks.update((0, 1), NO_TIME, True, caught_up=(("a", 0),))
    assert marks.value == 200
    probe.ingest[("a", 0)] = 3
    assert not marks.refresh()
    probe.ingest[("a", 1)] = 0
    assert marks.refresh() and marks.value == 500


def test_an_input_that_never_gave_a_record_holds_time_back_even_at_its_end() -> None:
    # An empty file, followed: the other side of a join must not expire what it buffered
    # before this side has started.
    probe = QueuesProbe()
    marks = InputWatermarks([(0, 0), (1, 0)], probe)
    probe.ends[("orders", 0)] = 9
    probe.ingest.update({("orders", 0): 9, ("payments", 0): 0})
    marks.update((0, 0), 800, True, caught_up=(("orders", 9),))
    marks.update((1, 0), NO_TIME, True, caught_up=(("payments", 0),))
    assert marks.value == NO_TIME
    probe.ends[("payments", 0)] = 2  # payments come: their time is the join's
    marks.update((1, 0), 300, False)
    assert marks.value == 300


def test_a_producer_of_two_inputs_is_never_left_out_for_being_caught_up() -> None:
    # Two files are not read in one order: a queue of one may get older lines later.
    probe = QueuesProbe()
    marks = InputWatermarks([(0, 0), (0, 1)], probe)
    probe.ends.update({("a", 0): 3, ("b", 0): 2})
    marks.update((0, 0), 70, False)
    marks.update((0, 1), 20, True, caught_up=(("a", 0), ("b", 0)))
    assert marks.value == 20
    marks.update((0, 0), 70, True, caught_up=(("a", 3), ("b", 2)))
    assert marks.value == 20  # all read, the files not: the smallest still counts
    probe.ingest.update({("a", 0): 3, ("b", 0): 2, ("a", 1): 0, ("b", 1): 0})
    assert marks.refresh() and marks.value == 70


def followed(source_queues: int, queues: int) -> tuple[LocalEngine, Callable[[int], None]]:
    """A window count whose first sub-topology reads input files (a durable run's), and
    ``punctuate(ms)``: the clock moves ``ms`` on, every task punctuates, then runs."""
    now = [0]
    engine = LocalEngine(
        window_count(source_queues, queues),
        MemoryBroker(),
        EngineConfig(caught_up_idle=True),
        clock=lambda: now[0],
    )

    def punctuate(ms: int) -> None:
        now[0] += ms
        for t in engine.tasks:
            t.punctuate(now[0])
        engine.run_until_idle()

    return engine, punctuate


def test_a_followed_input_on_some_queues_closes_windows_without_a_timeout() -> None:
    # A durable run's first sub-topology reads input files: a queue the input did not
    # reach does not hold the windows back, and once the ingest recorded the end of the
    # file, the last records' time closes what it closes (as one queue would).
    engine, punctuate = followed(source_queues=4, queues=2)
    broker = engine.broker
    feed(engine, 1, ("a", 10), ("b", 120), ("a", 230))
    punctuate(1000)
    # Queues 0, 2 and 3 hold nothing: queue 1's watermark is everyone's.
    assert [t.ctx.watermark for t in downstream(engine)] == [230, 230]
    assert sorted(r.key for r in broker.read("out", 0, 0, 100)) == [
        b'{"@windowed":["a",0,100],"closed":"event-time"}',
        b'{"@windowed":["b",100,200],"closed":"event-time"}',
    ]
    feed(engine, 2, ("c", 240))
    punctuate(1000)
    assert [t.ctx.watermark for t in downstream(engine)] == [240, 240]


def test_a_caught_up_queue_that_never_had_a_record_says_so_again_to_a_new_owner() -> None:
    # A consumer that moves to another worker (or restarts) has lost the control records
    # it read before its last commit. A producer whose queue the input never reached has
    # no time to send, only "caught up": it must say that again too, or the consumer's
    # new owner waits for it forever and no window closes again.
    engine, punctuate = followed(source_queues=4, queues=1)
    feed(engine, 1, ("a", 10), ("b", 120))
    punctuate(1000)
    (task,) = downstream(engine)
    assert task.step_clock.value == 120
    # The consumer's new owner: nothing of what it read before.
    task.step_clock.marks = InputWatermarks(
        list(task.step_clock.marks.marks), task.step_clock.marks.probe
    )
    feed(engine, 1, ("a", 230))
    punctuate(1000)
    assert task.step_clock.value == NO_TIME  # queues 0, 2, 3 not heard of yet
    punctuate(RESEND_WATERMARK_MS)
    assert task.step_clock.value == 230
