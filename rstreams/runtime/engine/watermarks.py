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
time assumes). The end of bounded input raises it to :data:`END`. A task whose user
source queues gave no record for ``EngineConfig.source_idle_ms`` says it is idle, and
its consumers leave it out of the minimum until it sends again.

A shuffle with a single producer carries no control records: its consumers judge time
by the largest timestamp they have seen, exactly as before watermarks existed.
"""

from __future__ import annotations

from typing import Any

import msgpack

#: No event time yet.
NO_TIME = -(2**62)
#: The watermark of an input that has ended.
END = 2**62

Producer = tuple[int, int]  # (sub-topology id, queue)


def encode_control(producer: Producer, watermark: int, idle: bool, high: int = NO_TIME) -> bytes:
    """``high``: the largest watermark short of END the producer has sent, so that a
    consumer restarted after the end of input still knows where its input's time got."""
    return msgpack.packb([producer[0], producer[1], watermark, idle, high])


def decode_control(value: bytes | None) -> tuple[Producer, int, bool, int]:
    sub, queue, watermark, idle, high = msgpack.unpackb(value or b"", use_list=False)
    return (int(sub), int(queue)), int(watermark), bool(idle), int(high)


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


class InputWatermarks:
    """The watermarks a task has received, per producer.

    :attr:`value` is their minimum over the producers not idle. Once every producer has
    ended (or is idle), it is the largest watermark any of them sent before that: the
    largest timestamp of the input, which is where one queue's stream time would be.
    Without producers it is :data:`END`: nothing bounds the task's time from outside.
    """

    __slots__ = ("idle", "marks", "top", "value")

    def __init__(self, producers: list[Producer]) -> None:
        self.marks: dict[Producer, int] = dict.fromkeys(producers, NO_TIME)
        self.idle: set[Producer] = set()
        self.top = NO_TIME  # the largest watermark received short of END
        self.value = NO_TIME if producers else END

    def update(self, producer: Producer, watermark: int, idle: bool, high: int = NO_TIME) -> bool:
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
        if idle:
            self.idle.add(producer)
        else:
            self.idle.discard(producer)
        value = min((w for p, w in self.marks.items() if p not in self.idle), default=END)
        if value >= END:
            value = self.top
        changed = value != self.value
        self.value = value
        return changed
