"""Column paths of the engine give what the record-at-a-time definitions give."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams import StreamBuilder
from rstreams import functions as F
from rstreams.runtime.engine.operators.batch import Batch
from rstreams.runtime.queues.base import LogRecord, RecordColumns
from rstreams.runtime.queues.mapper import HashRingQueueMapper, ModuloQueueMapper
from rstreams.serde import get_serde
from rstreams.testing import TopologyTestDriver

BUILTINS = [F.identity(), F.lower(), F.upper(), F.strip(), F.strip("x"), F.length(), F.words()]

text = st.text(st.sampled_from("aAxß İΣς1_ \t.é"), max_size=12)


class Shouty(str):
    def lower(self) -> str:  # a subclass's own method must be honoured
        return "SHOUT"


@settings(max_examples=200, deadline=None)
@given(values=st.lists(text, max_size=20))
def test_builtin_columns_equal_calls(values) -> None:
    for fn in BUILTINS:
        assert fn.column(values) == [fn(v) for v in values], fn


def test_builtin_column_honours_str_subclasses_and_rejects_other_types() -> None:
    assert F.lower().column(["A", Shouty("B")]) == ["a", "SHOUT"]
    with pytest.raises(TypeError, match=r"F\.lower"):
        F.lower().column(["a", 5])


def test_a_builtin_failing_on_one_record_follows_on_error() -> None:
    b = StreamBuilder("j")
    b.source("in", deserializer="json").map(F.lower()).sink("out", serializer="json")
    with TopologyTestDriver(b.build(), on_error="skip") as d:
        for v in ["A", 5, "B"]:
            d.pipe("in", v)
        assert d.read_values("out") == ["a", "b"]
        assert d.metrics["skipped"] == 1


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.none(),
            st.integers(-(2**63), 2**63),
            st.text(max_size=5),
            st.booleans(),
            st.floats(allow_nan=False),
        ),
        max_size=20,
    )
)
def test_serialize_many_equals_serialize(values) -> None:
    for name in ("json", "msgpack"):
        serde = get_serde(name)
        present = [v for v in values if v is not None]
        assert serde.serialize_many(present) == [serde.serialize(v) for v in present]
        assert serde.deserialize_many(serde.serialize_many(present)) == [
            serde.deserialize(serde.serialize(v)) for v in present
        ]


def test_msgpack_deserialize_many_refuses_a_truncated_last_value() -> None:
    serde = get_serde("msgpack")
    with pytest.raises(Exception, match="msgpack"):
        serde.deserialize_many([b"\x01", b"\x92\x03"])  # an array of 2 with 1 element


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(st.binary(max_size=8), max_size=50), queues=st.integers(1, 9))
def test_queues_for_equals_queue_for(keys, queues) -> None:
    for mapper in (ModuloQueueMapper(), HashRingQueueMapper()):
        assert mapper.queues_for(keys, queues) == [mapper.queue_for(k, queues) for k in keys]


def test_record_columns_round_trip_slice_and_concat() -> None:
    records = [LogRecord(i, i * 10, None, str(i).encode(), ()) for i in range(5, 12)]
    cols = RecordColumns.from_records(records)
    assert cols.records() == records
    assert cols.slice(2, 4).records() == records[2:4]
    assert cols.index_of(8) == 3 and cols.index_of(0) == 0 and cols.index_of(99) == 7
    dense = RecordColumns(range(5, 8), [0] * 3, [None] * 3, [b"a"] * 3, [()] * 3)
    more = RecordColumns(range(8, 10), [1] * 2, [None] * 2, [b"b"] * 2, [()] * 2)
    both = RecordColumns.concat([dense, RecordColumns.from_records([]), more])
    assert both.offsets == range(5, 10) and list(both.values) == [b"a"] * 3 + [b"b"] * 2
    gap = RecordColumns.concat([dense, RecordColumns([20], [0], [None], [b"c"], [()])])
    assert list(gap.offsets) == [5, 6, 7, 20] and gap.index_of(9) == 3


def test_flatmap_expansion_keeps_offsets_timestamps_and_headers() -> None:
    batch = Batch("t", 0, [None, None], ["a b", "c"], [7, 7], [10, 11], [(), (("h", b"1"),)])
    out = batch.expand([2, 1], ["a", "b", "c"])
    assert out.offsets == [10, 10, 11] and out.timestamps == [7, 7, 7]
    assert out.headers == [(), (), (("h", b"1"),)] and out.last_offset == 11
    assert out.max_timestamp == 7
    mixed = Batch("t", 0, ["k", None], ["x", "y"], [1, 2], [0, 1]).expand([0, 2], ["p", "q"])
    assert mixed.keys == [None, None] and mixed.timestamps == [2, 2] and mixed.last_offset == 1
