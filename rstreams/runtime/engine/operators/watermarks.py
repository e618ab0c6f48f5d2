"""Watermarks: the event time below which an upstream task will send nothing more.

Producers are tasks, named by ``(sub-topology id, queue)``: the same name whichever
worker runs the task, before and after a restart or a rebalance. After processing a
batch (and at commit, once combined or coalesced records went out) a task whose output
crosses a shuffle that has more than one producer appends a *watermark control record*
to every queue of that shuffle topic: key ``None`` (a shuffle never writes a data record
without a key) and a msgpack value ``[sub, queue, watermark, idle]``. It goes through the
task's producer like any data record, so it is in the same exactly-once transaction as
the records it follows, and it is read again after a restore like they are.

A task's own watermark is the minimum of its inputs: the watermarks received from the
producers of the shuffles it reads (:class:`InputWatermarks`) and, for inputs that do not
carry one (a user topic, or a shuffle with a single producer), the largest timestamp it
has sent through its shuffle sinks (input in order per queue, as Kafka Streams' stream
time assumes). The end of bounded input raises it to :data:`END`.

Inputs that are all read (``EngineConfig.caught_up_idle``, the durable runtime's input
files): a file is read by one ingest, in order, into every queue of its topic, round
robin. A task of the first sub-topology that has read everything its queues hold and
holds nothing back says it is *caught up*, with the positions it reached (the ``idle``
field of its control record is then those positions). A consumer leaves such a producer
out of the minimum while the queues still end there, which it checks against the broker
each time it computes its watermark: a chunk the ingest appended to that queue came
before every chunk that moved the other producers' watermarks, so nothing it holds can
have been overtaken. A producer of a sub-topology that reads two inputs never stays out
on that ground alone (two files are not read in one order). When every producer of a
sub-topology is caught up at the positions the ingest recorded when it last reached the
end of the input files (:func:`ingest_group`), that input no longer holds time back (once
it has given a record: an empty input holds time back until it starts), so a followed
file closes its windows as one partition would with the same lines, whichever queues
the lines landed in, without waiting for a timeout.

``EngineConfig.source_idle_ms``: a task whose user source queues gave no record for that
long says it is idle unconditionally, and its consumers leave it out of the minimum until
it sends again (for sources whose writers pause; files need no timeout).

A consumer's watermark never goes back: a producer that comes back from idle with older
data holds time where it got, it does not reopen what has closed.

**One time per producer, record by record.** A producer's time, as of a record it
sends, is the largest timestamp it has sent up to and including that record, on any
queue of the shuffle. A record in order carries that time itself; before a record
*behind* it (out of order), the producer tells that record's queue its time with a
control record (not the other queues: they are told before their own next record
behind it, or, where the shuffle has several producers, after the batch). So a
consumer judges every record by the time its producer had reached with it, whatever
the batch sizes, the queue the earlier records went to, or where a restart fell
(control records are in the log, in the transaction of the records they precede; at
least once, the producer keeps its time with its commit: :func:`producer_time_group`).

A shuffle with a single producer carries only those, and only when the step reading it
judges event time (a windowed aggregation or a join, :func:`carries_time`): its
consumers judge by the largest timestamp they have seen or been told. No control
record follows a batch there, and none says the input ended, so a window of a queue
that gets no later record closes at the end of input (``closed="end-of-input"``) even
where the producer's time had passed it: what is late is exact, only that label and
the moment such a window comes out are the queue's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import msgpack

from rstreams.dsl.windows import SessionWindow

#: No event time yet.
NO_TIME = -(2**62)
#: The watermark of an input that has ended.
END = 2**62

Producer = tuple[int, int]  # (sub-topology id, queue)
#: The end positions a caught-up producer reached, per user source topic it reads.
Positions = tuple[tuple[str, int], ...]


def ingest_group(job_id: str) -> str:
    """The group under which the durable runtime's ingest records, for every queue of an
    input's topic, the queue's end when it last reached the end of the input file.
    (Recorded as a consumer group's offsets: every broker keeps those, durably.)"""
    return f"{job_id}.ingest-end"


def producer_time_group(job_id: str) -> str:
    """The group under which a task that tells its consumers its time (at least once:
    exactly-once keeps it in its transactions) records, at each commit, the largest
    timestamp it has sent, for each shuffle topic it tells (as the offset of the
    topic's queue of the task's number), so that its next owner goes on from there."""
    return f"{job_id}.producer-time"


class Control(NamedTuple):
    """A watermark control record. ``caught_up``: the positions, when the producer is
    idle because it read all its input (``idle`` is then true too)."""

    producer: Producer
    watermark: int
    idle: bool
    high: int = NO_TIME
    caught_up: Positions | None = None


def encode_control(
    producer: Producer,
    watermark: int,
    idle: bool,
    high: int = NO_TIME,
    caught_up: Positions | None = None,
) -> bytes:
    """``high``: the largest watermark short of END the producer has sent, so that a
    consumer restarted after the end of input still knows where its input's time got."""
    fields: list[object] = [producer[0], producer[1], watermark, idle, high]
    if caught_up is not None:
        fields.append([list(p) for p in caught_up])
    return msgpack.packb(fields)


def decode_control(value: bytes | None) -> Control:
    sub, queue, watermark, idle, high, *rest = msgpack.unpackb(value or b"", use_list=False)
    caught_up = tuple((str(t), int(p)) for t, p in rest[0]) if rest else None
    return Control((int(sub), int(queue)), int(watermark), bool(idle), int(high), caught_up)


class SourceProbe(Protocol):
    """What a consumer asks the broker about a caught-up producer's source queues."""

    def at_end(self, queries: Sequence[tuple[int, Positions]]) -> list[bool]:
        """For each (queue, positions): queue ``queue`` of each topic still ends at the
        position given (all in one question: on a networked broker, one round trip)."""

    def ingest_ended(self, caught_up: Sequence[tuple[int, Positions]]) -> bool:
        """For each (queue, positions): the ingest recorded that it reached the end of
        each topic's input file when the queue ended at the position given."""


def task_count(topology: Any, sub: Any, queue_count: Any) -> int:
    """Tasks of sub-topology ``sub``: one per queue of its widest source topic."""
    return max((queue_count(t) or 0) for t in sub.source_topics)


def producers_of(topology: Any, topic: str, queue_count: Any) -> list[Producer]:
    """Every task that writes shuffle topic ``topic``."""
    out: list[Producer] = []
    for sub in topology.subtopologies:
        if any(f.kind == "shuffle-sink" and f.topic == topic for f in sub.factories):
            out.extend((sub.id, q) for q in range(task_count(topology, sub, queue_count)))
    return out


#: The processor kinds that judge event time.
TIMED_KINDS = frozenset({"window-aggregate", "join"})


def carries_time(topology: Any, topic: str, queue_count: Any) -> bool:
    """Does shuffle topic ``topic`` carry control records: it has several producers, or
    one and a consumer that judges event time?"""
    if len(producers_of(topology, topic, queue_count)) > 1:
        return True
    return any(
        f.kind in TIMED_KINDS for sub in topology.subtopology_of_topic(topic) for f in sub.factories
    )


def watermarked(topology: Any, topic: str, queue_count: Any) -> bool:
    """Does shuffle topic ``topic`` carry watermark control records (sent after each
    processed batch)? When it has several producers, and when it feeds a join: a
    producer's batch reaches a join one side after the other (each branch of the batch
    in turn), so a time told before a record would run ahead of the other side's
    records of the same batch (a windowed join would then expire, or take for late,
    what the other side still has to match); a watermark sent after the whole batch
    does not."""
    if len(producers_of(topology, topic, queue_count)) > 1:
        return True
    return any(
        f.kind == "join" for sub in topology.subtopology_of_topic(topic) for f in sub.factories
    )


def told_slack(topology: Any, topic: str) -> int:
    """How far behind its producer's time a record sent to ``topic`` may be without
    its queue being told that time first (see :func:`send_told`): the smallest grace of
    the windowed aggregations reading it (sessions: one less). A record at most that far
    behind updates the same windows and sessions whether its consumer's time is the
    producer's or its own records' (a window of the record ends after it, so it closes
    after ``ts + grace``); only the moment a window closes moves, up to the end of the
    batch, where the queue is told. 0 (tell every record behind) where a step between
    the shuffle and the window may change timestamps, or a join reads it."""
    slack: int | None = None
    for sub in topology.subtopology_of_topic(topic):
        for f in sub.factories:
            if f.kind in ("selectTimestamp", "join"):
                return 0
            if f.kind != "window-aggregate":
                continue
            window = f.node.window
            grace = int(window.grace)
            if isinstance(window, SessionWindow):
                grace = max(0, grace - 1)  # (a session closes at end + gap + grace, inclusive)
            slack = grace if slack is None else min(slack, grace)
    return slack or 0


def send_told(
    timestamps: Sequence[int],
    top: int,
    send: Callable[[int, int], None],
    tell: Callable[[int, int], None],
    slack: int = 0,
    queues: Sequence[int] | int = 0,
) -> int:
    """Send a producer's records (``timestamps`` in its order) in parts, ``send(start,
    stop)`` the records ``[start, stop)``: before a record more than ``slack`` behind
    ``top`` and the timestamps before it, ``tell(queue, time)`` tells the queue the
    record goes to (``queues[i]``, or ``queues`` for all) that time. Records in order
    need nothing: their own timestamp is that time. A record behind by ``slack`` or less
    goes with the others (no part cut, no control record, the cost of out-of-order input
    within grace), and its queue is told the time it would have had after the batch,
    unless a later record of that queue brought it there. Returns the largest timestamp
    sent."""
    start = 0
    queue_of: Sequence[int] = [queues] * len(timestamps) if isinstance(queues, int) else queues
    later: dict[int, int] = {}  # queue -> the time it is told after the batch
    for i, ts in enumerate(timestamps):
        if ts >= top:
            top = ts
            if later:
                later.pop(queue_of[i], None)
            continue
        q = queue_of[i]
        if top - ts <= slack:
            later[q] = top
            continue
        if i > start:
            send(start, i)
            start = i
        tell(q, top)
        later.pop(q, None)
    send(start, len(timestamps))
    for q, time in later.items():
        tell(q, time)
    return top


class InputWatermarks:
    """The watermarks a task has received, per producer.

    :attr:`value` is their minimum over the producers not idle (and not caught up, see
    the module docstring). Once every producer has ended (or is idle), it is the largest
    watermark any of them sent before that: the largest timestamp of the input, which is
    where one queue's stream time would be. Without producers it is :data:`END`: nothing
    bounds the task's time from outside. It never goes back.
    """

    __slots__ = ("caught_up", "idle", "marks", "probe", "top", "value")

    def __init__(self, producers: list[Producer], probe: SourceProbe | None = None) -> None:
        self.marks: dict[Producer, int] = dict.fromkeys(producers, NO_TIME)
        self.idle: set[Producer] = set()
        #: Producers idle because they read all their input, with the positions.
        self.caught_up: dict[Producer, Positions] = {}
        self.probe = probe
        self.top = NO_TIME  # the largest watermark received short of END
        self.value = NO_TIME if producers else END

    def update(
        self,
        producer: Producer,
        watermark: int,
        idle: bool,
        high: int = NO_TIME,
        caught_up: Positions | None = None,
    ) -> bool:
        """Note a control record; True if :attr:`value` changed. A producer's watermark
        never goes back (a restarted producer may resend an older one)."""
        if producer not in self.marks:
            return False  # not a producer of ours (e.g. a topology since changed)
        if high < END and high > self.top:
            self.top = high
        if watermark > self.marks[producer]:
            self.marks[producer] = watermark
            if watermark < END and watermark > self.top:
                self.top = watermark
        self.caught_up.pop(producer, None)
        self.idle.discard(producer)
        if caught_up is not None and self.probe is not None:
            self.caught_up[producer] = caught_up
        elif idle:
            self.idle.add(producer)
        return self.refresh()

    def refresh(self) -> bool:
        """Compute :attr:`value` again (caught-up producers' queues may have grown or
        their input ended since); True if it changed."""
        value = self._minimum()
        if value >= END:
            value = self.top
        if value <= self.value:
            return False
        self.value = value
        return True

    def _minimum(self) -> int:
        if not self.caught_up:
            return min((w for p, w in self.marks.items() if p not in self.idle), default=END)
        probe = self.probe
        assert probe is not None
        groups: dict[int, list[Producer]] = {}
        for p in self.marks:
            groups.setdefault(p[0], []).append(p)
        asked = [p for p in self.marks if p not in self.idle and self.caught_up.get(p) is not None]
        ended = dict(
            zip(asked, probe.at_end([(p[1], self.caught_up[p]) for p in asked]), strict=True)
        )
        value = END
        for members in groups.values():
            held: list[int] = []  # the watermarks of members that hold time back
            at_end: list[Producer] = []  # caught up, and their queues still end there
            awake = 0
            for p in members:
                if p in self.idle:
                    continue
                awake += 1
                positions = self.caught_up.get(p)
                if positions is not None and ended[p]:
                    at_end.append(p)
                    if len(positions) == 1:
                        continue  # one input, read in order: nothing of it is behind
                held.append(self.marks[p])
            if at_end and len(at_end) == awake:
                # All of this input is read: it holds nothing back. Unless it never gave
                # a record: an input not started yet (an empty file, followed) holds
                # time back, or a join would drop everything its other side buffered.
                started = any(self.marks[p] > NO_TIME for p in at_end)
                if started and probe.ingest_ended([(p[1], self.caught_up[p]) for p in at_end]):
                    continue
                if not held:
                    # Every queue read, but the ingest has not reached the end of the
                    # input yet: time is where the input got.
                    value = min(value, max(self.marks[p] for p in at_end))
                    continue
            if held:
                value = min(value, *held)
        return value
