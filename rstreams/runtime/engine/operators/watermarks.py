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
producers of the shuffles it reads (:class:`InputWatermarks`, per producer and topic:
a producer's mark read on one shuffle does not count for its records on another) and,
for inputs that do not carry one (a user topic, or a shuffle with a single producer),
the largest timestamp it has sent through its shuffle sinks (input in order per queue,
as Kafka Streams' stream time assumes). The end of bounded input raises it to :data:`END`.

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
consumers judge by the largest timestamp they have seen or been told. After each
batch the producer tells every queue its time moved past (``StepClock.tells_due``), so
a window of a queue that gets no later record still closes by event time once that
time passed it, as on the test driver and Spark.

Which inputs and outputs carry what, and the minimum over producers, are the rules of
:mod:`rstreams.semantics.clock` (re-exported here); this module is their wire format.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgpack

# The time rules themselves (which inputs carry time, the minimum over producers) are
# the stream-time clock's, shared with the other backends; the wire format is here.
from rstreams.semantics.clock import (
    END,
    NO_TIME,
    TIMED_KINDS,
    InputWatermarks,
    Positions,
    Producer,
    SourceProbe,
    carries_time,
    producers_of,
    task_count,
    told_slack,
    watermarked,
)

__all__ = [
    "END",
    "NO_TIME",
    "TIMED_KINDS",
    "Control",
    "InputWatermarks",
    "Positions",
    "Producer",
    "SourceProbe",
    "carries_time",
    "decode_control",
    "encode_control",
    "ingest_group",
    "producer_time_group",
    "producers_of",
    "send_told",
    "task_count",
    "told_slack",
    "watermarked",
]


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
