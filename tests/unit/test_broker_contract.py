"""The Broker protocol's contract (rstreams.runtime.queues.broker), checked on every broker.

Each test runs on MemoryBroker and on FileBroker (small segments, so compaction and
purges work on several files); tests/redis/test_broker_contract_redis.py runs them on
RedisBroker against a real redis-server (this directory starts no servers). What the
file log alone does (durability, crash recovery, damage) is in test_filelog.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rstreams.errors import ConfigError
from rstreams.runtime.queues import Broker, FileBroker, LogRecord, MemoryBroker
from rstreams.runtime.queues._logformat import encode_batch
from rstreams.runtime.queues.base import RecordColumns

Record = tuple[int, bytes | None, bytes | None, tuple]


def rec(value: bytes | None, key: bytes | None = None, ts: int = 0, headers: tuple = ()) -> Record:
    return (ts, key, value, headers)


def as_tuples(records: list[LogRecord]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


@pytest.fixture(params=["memory", "file"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    b: Broker
    if request.param == "memory":
        b = MemoryBroker()
    else:
        b = FileBroker(tmp_path / "log", segment_bytes=300, index_interval_bytes=64)
    yield b
    b.close()


@pytest.fixture
def t(broker: Broker) -> Broker:
    """The broker with topic "t" of 2 queues."""
    broker.create_topic("t", 2)
    return broker


# -- topics -----------------------------------------------------------------------------------


def test_topics_are_created_once_with_their_queue_count(broker: Broker) -> None:
    assert broker.queue_count("t") is None
    assert broker.topics() == {}
    broker.create_topic("t", 2)
    broker.append("t", 1, [rec(b"a")])
    broker.create_topic("t", 2)  # idempotent: records kept
    assert broker.end_offset("t", 1) == 1
    broker.create_topic("c", 1, compacted=True, retention_ms=None, segment_bytes=1000)
    broker.create_topic("r", 3, retention_ms=60_000, retention_bytes=10_000)
    assert broker.queue_count("t") == 2
    assert broker.topics() == {"c": 1, "r": 3, "t": 2}
    with pytest.raises(ConfigError, match="topic 't' exists with 2 queues; asked for 3"):
        broker.create_topic("t", 3)
    with pytest.raises(ConfigError, match="topic 'u' needs at least one queue; got 0"):
        broker.create_topic("u", 0)
    with pytest.raises(ConfigError, match="names must be non-empty strings"):
        broker.create_topic("", 1)
    assert broker.queue_count("u") is None
    for q in range(3):
        assert broker.start_offset("r", q) == broker.end_offset("r", q) == 0


# -- append -----------------------------------------------------------------------------------


def test_appends_get_dense_offsets_and_return_the_first(t: Broker) -> None:
    assert t.append("t", 0, [rec(b"a"), rec(b"b")]) == 0
    assert t.append("t", 1, [rec(b"x")]) == 0  # every queue counts from 0
    assert t.append_columns("t", 0, [5, 6], [b"k", None], [b"c", None], [(), (("h", b"1"),)]) == 2
    payload, count, max_ts = encode_batch([rec(b"e", ts=7), rec(b"f", ts=9)]) or (b"", 0, 0)
    assert t.append_encoded("t", 0, payload, count, max_ts) == 4
    assert t.append("t", 0, iter([rec(b"g")])) == 6  # any iterable
    assert t.append("t", 0, []) == 7  # nothing: the end, unchanged
    assert t.append_columns("t", 0, [], [], [], []) == 7
    assert t.end_offset("t", 0) == 7 and t.end_offset("t", 1) == 1
    assert as_tuples(t.read("t", 0, 0)) == [
        (0, 0, None, b"a", ()),
        (1, 0, None, b"b", ()),
        (2, 5, b"k", b"c", ()),
        (3, 6, None, None, (("h", b"1"),)),
        (4, 7, None, b"e", ()),
        (5, 9, None, b"f", ()),
        (6, 0, None, b"g", ()),
    ]


def test_end_offsets_of_many_queues_in_one_call(t: Broker) -> None:
    assert t.end_offsets([]) == []
    assert t.end_offsets([("t", 0), ("t", 1)]) == [0, 0]
    t.append("t", 0, [rec(b"a"), rec(b"b"), rec(b"c")])
    t.append("t", 1, [rec(b"x")])
    t.purge("t", 0, 2)  # the end stays where it was
    t.create_topic("u", 1)
    queues = [("t", 1), ("u", 0), ("t", 0), ("t", 1)]  # any order, repeats allowed
    assert t.end_offsets(queues) == [t.end_offset(tq, q) for tq, q in queues] == [1, 0, 3, 1]
    assert t.end_offsets(iter([("t", 0)])) == [3]  # any iterable
    with pytest.raises(ConfigError, match="topic 'nope' does not exist"):
        t.end_offsets([("t", 0), ("nope", 0)])
    with pytest.raises(ConfigError, match="has no queue 2"):
        t.end_offsets([("t", 2)])


def test_malformed_records_are_type_errors_and_append_nothing(t: Broker) -> None:
    t.append("t", 0, [rec(b"a")])
    with pytest.raises(TypeError, match="records must be"):
        t.append("t", 0, [(1, None, b"v")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="records must be"):
        t.append("t", 0, [rec(b"v"), (1, None, b"v")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="timestamps must be int"):
        t.append("t", 0, [(1.5, None, b"v", ())])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="timestamps must be int"):
        t.append_columns("t", 0, [1, True], [None, None], [b"a", b"b"], [(), ()])
    with pytest.raises(TypeError, match="different lengths"):
        t.append_columns("t", 0, [1, 2], [None], [b"a", b"b"], [(), ()])
    assert t.end_offset("t", 0) == 1
    assert [r.value for r in t.read("t", 0, 0)] == [b"a"]


# -- read -------------------------------------------------------------------------------------


def test_read_from_an_offset_up_to_max_records(t: Broker) -> None:
    for i in range(0, 40, 8):  # several appends, several segments in the file log
        t.append("t", 0, [rec(bytes([j]), key=b"k%d" % j, ts=j) for j in range(i, i + 8)])
    assert [r.offset for r in t.read("t", 0, 0)] == list(range(40))
    assert [r.value for r in t.read("t", 0, 13, max_records=5)] == [
        bytes([j]) for j in range(13, 18)
    ]
    assert [r.offset for r in t.read("t", 0, 37, max_records=10)] == [37, 38, 39]
    assert [r.offset for r in t.read("t", 0, 30, max_records=None)] == list(range(30, 40))
    got, pos = [], 0
    while chunk := t.read("t", 0, pos, max_records=3):
        got += chunk
        pos = chunk[-1].offset + 1
    assert [r.offset for r in got] == list(range(40))


def test_read_at_or_after_the_end_and_of_no_records_is_empty(t: Broker) -> None:
    assert t.read("t", 0, 0) == []
    t.append("t", 0, [rec(b"a"), rec(b"b")])
    assert t.read("t", 0, 2) == [] and t.read("t", 0, 99) == []
    assert t.read("t", 0, 0, max_records=0) == []
    assert t.read("t", 0, 0, max_records=-1) == []
    assert len(t.read_columns("t", 0, 2)) == 0
    assert len(t.read_columns("t", 0, 0, max_records=0)) == 0
    assert len(t.read_columns("t", 0, 0, max_records=-3)) == 0


def _columns(c: RecordColumns) -> tuple[list, ...]:
    return (list(c.offsets), list(c.timestamps), list(c.keys), list(c.values), list(c.headers))


def test_read_columns_is_read_as_columns(t: Broker) -> None:
    for i in range(6):
        t.append(
            "t",
            1,
            [
                rec(b"v%d" % j, key=b"k", ts=j, headers=(("n", b"%d" % j),))
                for j in range(i * 5, i * 5 + 5)
            ],
        )
    for offset in (0, 1, 7, 29, 30, 31):
        for limit in (None, 1, 4, 100):
            records = t.read("t", 1, offset, limit)
            columns = t.read_columns("t", 1, offset, limit)
            assert isinstance(columns, RecordColumns)
            assert columns.records() == records
            assert _columns(columns) == _columns(RecordColumns.from_records(records))


# -- start and end offsets, purge ---------------------------------------------------------------


def test_purge_moves_the_start_offset_and_never_reuses_offsets(t: Broker) -> None:
    for _ in range(4):
        t.append("t", 0, [rec(b"x" * 40)] * 3)
    assert (t.start_offset("t", 0), t.end_offset("t", 0)) == (0, 12)
    t.purge("t", 0, 5)
    assert (t.start_offset("t", 0), t.end_offset("t", 0)) == (5, 12)
    assert [r.offset for r in t.read("t", 0, 5)] == list(range(5, 12))
    with pytest.raises(ConfigError, match=r"offset 4 of t\[0\] was purged; the queue starts at 5"):
        t.read("t", 0, 4)
    with pytest.raises(ConfigError, match="was purged"):
        t.read_columns("t", 0, 0)
    t.purge("t", 0, 2)  # below the start: nothing
    assert t.start_offset("t", 0) == 5
    t.purge("t", 0, 99)  # beyond the end: up to the end
    assert t.start_offset("t", 0) == t.end_offset("t", 0) == 12
    assert t.read("t", 0, 12) == []
    assert t.append("t", 0, [rec(b"y")]) == 12
    assert (t.start_offset("t", 1), t.end_offset("t", 1)) == (0, 0)  # other queues untouched


# -- compaction and retention -------------------------------------------------------------------


def test_compaction_keeps_the_latest_record_of_every_key(broker: Broker) -> None:
    broker.create_topic("c", 1, compacted=True)
    written: list[tuple[int, bytes | None, bytes]] = []
    for i in range(12):  # several appends (and segments in the file log)
        batch = [rec(b"%d-%d" % (i, j), key=None if j == 3 else b"k%d" % (j % 3)) for j in range(4)]
        first = broker.append("c", 0, batch)
        written += [(first + j, r[1], r[2]) for j, r in enumerate(batch) if r[2] is not None]
    broker.flush()
    end = broker.end_offset("c", 0)
    removed = broker.compact("c", 0)
    got = broker.read("c", 0, 0)
    assert removed >= 0 and len(got) == len(written) - removed
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets)) and set(offsets) <= {o for o, _, _ in written}
    latest = {k: (o, v) for o, k, v in written if k is not None}
    kept = {(r.offset, r.value) for r in got}
    assert set(latest.values()) <= kept  # the latest of every key, at its offset
    assert {(o, v) for o, k, v in written if k is None} <= kept  # keyless records stay
    for r in got:  # what stays is what was written there
        assert (r.offset, r.key, r.value) in written
    assert broker.end_offset("c", 0) == end and broker.start_offset("c", 0) == 0
    assert broker.append("c", 0, [rec(b"new", key=b"k0")]) == end
    assert [r.value for r in broker.read("c", 0, end)] == [b"new"]
    broker.create_topic("n", 1)
    with pytest.raises(ConfigError, match="topic 'n' is not compacted"):
        broker.compact("n", 0)


def test_retention_reports_what_it_deleted(broker: Broker) -> None:
    broker.create_topic("r", 1, retention_bytes=0)
    broker.create_topic("keep", 1)
    for _ in range(10):
        broker.append("r", 0, [rec(b"x" * 100)])
        broker.append("keep", 0, [rec(b"x" * 100)])
    deleted = broker.enforce_retention()  # segments of the file log; nothing in memory
    start = broker.start_offset("r", 0)
    assert deleted >= 0 and (deleted > 0) == (start > 0)
    assert start < broker.end_offset("r", 0) == 10  # the last segment always stays
    assert [r.offset for r in broker.read("r", 0, start)] == list(range(start, 10))
    assert broker.start_offset("keep", 0) == 0


# -- consumer groups ----------------------------------------------------------------------------


def test_committed_offsets_per_group_topic_and_queue(t: Broker) -> None:
    t.create_topic("u", 1)
    t.append("t", 0, [rec(b"a")] * 5)
    assert t.committed("g", "t", 0) == 0
    assert t.groups() == [] and t.group_offsets("g") == {}
    t.commit("g", "t", 0, 5)
    t.commit("g", "t", 1, 0)
    t.commit("g", "u", 0, 0)
    t.commit("a", "t", 0, 2)
    t.commit("g", "t", 0, 3)  # a group may go back
    assert (t.committed("g", "t", 0), t.committed("a", "t", 0), t.committed("a", "t", 1)) == (
        3,
        2,
        0,
    )
    assert t.groups() == ["a", "g"]
    assert t.group_offsets("g") == {("t", 0): 3, ("t", 1): 0, ("u", 0): 0}
    assert t.group_offsets("a") == {("t", 0): 2}
    assert t.group_offsets("nobody") == {}
    with pytest.raises(ConfigError, match="cannot commit offset -1"):
        t.commit("g", "t", 0, -1)
    with pytest.raises(ConfigError, match="names must be non-empty strings"):
        t.commit("", "t", 0, 1)
    assert t.committed("g", "t", 0) == 3


def test_commit_many_commits_each_in_order_and_checks_all_first(t: Broker) -> None:
    t.create_topic("u", 2)
    t.commit_many([])
    assert t.groups() == []
    t.commit_many([("g", "u", 0, 4), ("g", "u", 1, 2), ("a", "u", 0, 1), ("g", "u", 0, 5)])
    assert t.group_offsets("g") == {("u", 0): 5, ("u", 1): 2}  # the last of a queue wins
    assert t.group_offsets("a") == {("u", 0): 1}
    with pytest.raises(ConfigError, match="cannot commit offset -1"):
        t.commit_many([("g", "u", 0, 9), ("g", "u", 1, -1)])
    assert t.group_offsets("g") == {("u", 0): 5, ("u", 1): 2}  # nothing of it recorded


# -- lifetime -----------------------------------------------------------------------------------


def test_flush_and_close_may_be_called_again(t: Broker) -> None:
    t.append("t", 0, [rec(b"a")])
    t.flush()
    t.flush()
    t.close()
    t.close()
    t.flush()


# -- errors -------------------------------------------------------------------------------------

CALLS = {
    "append": lambda b, t, q: b.append(t, q, [rec(b"a")]),
    "append nothing": lambda b, t, q: b.append(t, q, []),
    "append_columns": lambda b, t, q: b.append_columns(t, q, [0], [None], [b"a"], [()]),
    "append_encoded": lambda b, t, q: b.append_encoded(t, q, *(encode_batch([rec(b"a")]) or ())),
    "read": lambda b, t, q: b.read(t, q, 0),
    "read_columns": lambda b, t, q: b.read_columns(t, q, 0, 1),
    "start_offset": lambda b, t, q: b.start_offset(t, q),
    "end_offset": lambda b, t, q: b.end_offset(t, q),
    "purge": lambda b, t, q: b.purge(t, q, 1),
    "compact": lambda b, t, q: b.compact(t, q),
}


@pytest.mark.parametrize("call", CALLS)
def test_unknown_topics_and_queues_are_config_errors(broker: Broker, call: str) -> None:
    broker.create_topic("t", 2, compacted=True)
    f = CALLS[call]
    with pytest.raises(ConfigError, match="topic 'nope' does not exist"):
        f(broker, "nope", 0)
    for q in (2, -1):
        with pytest.raises(ConfigError, match=rf"topic 't' has no queue {q} \(it has 2\)"):
            f(broker, "t", q)
    assert broker.topics() == {"t": 2}
    assert broker.end_offset("t", 0) == broker.end_offset("t", 1) == 0
