"""The exactly-once transaction record (its bytes, what it refuses), the log that
collects changelog records for it, and the committer that writes and redoes it."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.engine.operators.watermarks import NO_TIME
from rstreams.runtime.engine.tasks.commit import Committer
from rstreams.runtime.engine.tasks.transaction import (
    TXN_HEADER,
    Append,
    Transaction,
    TransactionFormatError,
    TransactionLog,
)
from rstreams.runtime.queues import MemoryBroker
from rstreams.runtime.queues._logformat import encode_column_batch
from rstreams.serde import get_serde
from rstreams.state import MemoryStore, store_stack

MSGPACK = get_serde("msgpack")


def frame(*values: bytes) -> tuple[bytes, int, int]:
    n = len(values)
    encoded = encode_column_batch(list(range(n)), [b"k"] * n, list(values), [()] * n)
    assert encoded is not None
    return encoded


def test_the_bytes_are_those_the_earlier_writer_wrote() -> None:
    """A job written before the typed record must recover after it: same map, same
    key order, appends as arrays, times as an array."""
    payload, count, max_ts = frame(b"1", b"2")
    txn = Transaction(
        "1_0", 4, {"in": 12, "in2": 3}, (Append("out", 2, 40, payload, count, max_ts),), (9, 11)
    )
    earlier = msgpack.packb(
        {
            "task": "1_0",
            "seq": 4,
            "offsets": {"in": 12, "in2": 3},
            "appends": [["out", 2, 40, payload, count, max_ts]],
            "times": (9, 11),
        },
        use_bin_type=True,
    )
    assert txn.encode() == earlier
    assert Transaction.decode(earlier) == txn


def test_a_record_without_times_decodes_with_no_time() -> None:
    old = msgpack.packb(
        {"task": "0_0", "seq": 1, "offsets": {"in": 1}, "appends": [["out", 0, 5, b"", 1, 0]]},
        use_bin_type=True,
    )
    txn = Transaction.decode(old)
    assert txn.times == (NO_TIME, NO_TIME)
    assert txn.appends == (Append("out", 0, 5, b"", 1, 0),)
    assert (txn.task, txn.seq, txn.offsets) == ("0_0", 1, {"in": 1})


def test_marker_and_written() -> None:
    txn = Transaction("2_3", 17, {}, (Append("a", 0, 0, b"", 1, 0), Append("b", 1, 0, b"", 1, 0)))
    assert txn.marker == (TXN_HEADER, b"2_3:17")
    assert txn.written == [("a", 0), ("b", 1)]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb([1, 2]), "a transaction is a map, not tuple"),
        # An earlier release's shape: rows instead of encoded frames.
        (
            b"\x84\xa4task\xa30_0\xa3seq\x01\xa7offsets\x80\xa7appends\x91\x94\xa1t\x00\x00\x90",
            "its appends are not",
        ),
        (msgpack.packb({"task": "0_0", "appends": []}), "it lacks task, seq or offsets"),
        (
            msgpack.packb({"task": "0_0", "seq": "x", "offsets": {}, "appends": []}),
            "wrong type",
        ),
    ],
)
def test_what_is_not_a_transaction_is_refused_saying_why(data: bytes, says: str) -> None:
    with pytest.raises(TransactionFormatError, match=says):
        Transaction.decode(data)


names = st.text(min_size=1, max_size=8)
appends = st.builds(
    Append,
    names,
    st.integers(0, 64),
    st.integers(0, 2**40),
    st.binary(max_size=20),
    st.integers(1, 10_000),
    st.integers(-(2**62), 2**62),
)


@settings(max_examples=100, deadline=None)
@given(
    task=names,
    seq=st.integers(1, 2**40),
    offsets=st.dictionaries(names, st.integers(0, 2**40), max_size=4),
    appends=st.lists(appends, max_size=4).map(tuple),
    times=st.tuples(st.integers(-(2**62), 2**62), st.integers(-(2**62), 2**62)),
    told=st.dictionaries(names, st.integers(-(2**62), 2**62), max_size=3),
)
def test_decode_gives_back_what_was_encoded(task, seq, offsets, appends, times, told) -> None:
    txn = Transaction(task, seq, offsets, appends, times, told)
    assert Transaction.decode(txn.encode()) == txn


def test_a_record_without_told_times_decodes_with_none_told() -> None:
    """Written before each told step's time was kept: the task falls back to its
    largest time for every step (Task._init_clock)."""
    old = msgpack.packb(
        {"task": "0_0", "seq": 1, "offsets": {}, "appends": [], "times": (7, 9)},
        use_bin_type=True,
    )
    assert Transaction.decode(old).told == {}
    told = Transaction("0_0", 1, {}, (), (7, 9), {"a-repartition": 3})
    assert Transaction.decode(told.encode()).told == {"a-repartition": 3}
    bad = msgpack.packb({**msgpack.unpackb(old), "told": [1, 2]}, use_bin_type=True)
    with pytest.raises(TransactionFormatError, match="wrong type"):
        Transaction.decode(bad)


def test_the_transaction_log_collects_changelog_records_in_order() -> None:
    broker = MemoryBroker()
    broker.create_topic("c", 2)
    broker.append("c", 1, [(0, b"k", b"v", ())])
    log = TransactionLog(broker)
    log.append_columns("c", 1, [5], [b"a"], [b"1"], [()])
    log.append_columns("c", 0, [5, 5], [b"b", b"c"], [None, b"3"], [(), ()])
    assert log.end_offset("c", 1) == 1  # nothing reached the broker
    assert broker.end_offset("c", 0) == 0
    assert log.take() == [
        (("c", 1), ([5], [b"a"], [b"1"], [()])),
        (("c", 0), ([5, 5], [b"b", b"c"], [None, b"3"], [(), ()])),
    ]
    assert log.take() == []


# -- the committer --------------------------------------------------------------------------


def eos_setup() -> tuple[MemoryBroker, Producer, Committer]:
    broker = MemoryBroker()
    for topic in ("in", "out", "c-changelog", "t-transactions"):
        broker.create_topic(topic, 1)
    producer = Producer(broker)
    return broker, producer, Committer("0_0", 0, "g", broker, producer, "t-transactions", 0)


def test_a_transaction_cut_short_is_finished_once_by_the_next_owner() -> None:
    broker, producer, committer = eos_setup()
    store = store_stack(MemoryStore("c"), MSGPACK, MSGPACK, "c-changelog", 0, committer.log)
    store.put("a", 1)
    producer.send("out", 0, b"k", b"v1", 1, ())
    producer.send("out", 0, b"k", b"v2", 2, ())
    c = committer.begin(5, [store], {"in": 3}, (1, 2))
    assert c is not None and c.txn is not None
    assert c.written == [("out", 0), ("c-changelog", 0)]
    assert broker.end_offset("out", 0) == 0  # nothing is visible before the commit point
    broker.flush()  # the commit point
    first = c.txn.appends[0]  # the owner dies after appending the outputs only
    broker.append_encoded(first.topic, first.queue, first.payload, first.records, first.max_ts)

    again = Committer("0_0", 0, "g", broker, Producer(broker), "t-transactions", 0)
    assert again.recover() == (1, 2)
    assert [r.value for r in broker.read("out", 0, 0)] == [b"v1", b"v2"]  # not twice
    (logged,) = broker.read("c-changelog", 0, 0)
    assert MSGPACK.deserialize(logged.value or b"") == 1
    assert broker.committed("g", "in", 0) == 3 and again.seq == 1
    # A transaction fully applied is left as it is.
    assert Committer("0_0", 0, "g", broker, producer, "t-transactions", 0).recover() == (1, 2)
    assert broker.end_offset("out", 0) == 2 and broker.end_offset("c-changelog", 0) == 1


def test_the_next_owner_gets_the_time_told_to_each_step() -> None:
    broker, producer, committer = eos_setup()
    producer.send("out", 0, b"k", b"v", 1, ())
    told = {"a-repartition": 100, "b-repartition": 20}
    c = committer.begin(5, [], {"in": 3}, (100, 90), None, told)
    assert c is not None and c.txn is not None and c.txn.told == told
    broker.flush()
    committer.apply(c)
    again = Committer("0_0", 0, "g", broker, Producer(broker), "t-transactions", 0)
    assert again.recover() == (100, 90) and again.restored_told == told


def test_nothing_to_commit_writes_no_transaction() -> None:
    broker, _, committer = eos_setup()
    store = store_stack(MemoryStore("c"), MSGPACK, MSGPACK, "c-changelog", 0, committer.log)
    assert committer.begin(0, [store], {}, (NO_TIME, NO_TIME)) is None
    assert broker.end_offset("t-transactions", 0) == 0
