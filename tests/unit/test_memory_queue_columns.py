"""The memory broker keeps records appended as columns as those columns; whoever
appends record by record afterwards (the test driver's producer) continues their
offsets, and every read sees one queue in offset order."""

from __future__ import annotations

from rstreams.runtime.queues.memory import MemoryBroker
from rstreams.testing import _RecordingProducer


def test_records_sent_one_by_one_after_columns_continue_their_offsets() -> None:
    broker = MemoryBroker()
    broker.create_topic("t", 2)
    assert broker.append_columns("t", 0, [1, 2], [b"a", b"b"], [b"1", b"2"], [(), ()]) == 0
    producer = _RecordingProducer(broker)
    producer.send("t", 0, b"c", b"3", 3, ())
    producer.send_routed("t", [0, 1], [4, 5], [b"d", b"e"], [b"4", b"5"], [(), ()])
    assert producer.order["t"] == ([0, 0, 1], [2, 3, 0])
    assert [(r.offset, r.key) for r in broker.read("t", 0, 0)] == [
        (0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"),
    ]  # fmt: skip
    columns = broker.read_columns("t", 0, 1)
    assert list(columns.offsets) == [1, 2, 3] and list(columns.values) == [b"2", b"3", b"4"]
    broker.append_columns("t", 0, [6], [b"f"], [b"6"], [()])
    producer.send("t", 0, b"g", b"7", 7, ())
    assert [r.offset for r in broker.read("t", 0, 3)] == [3, 4, 5]
    assert broker.end_offset("t", 0) == 6
