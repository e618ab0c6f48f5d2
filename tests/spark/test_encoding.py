"""The column layouts keep Python values exactly, and equal values encode equally."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstreams.runtime.spark import encoding as enc

pytestmark = pytest.mark.slow

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def round_trip(vals: list[Any], kind: str) -> list[Any]:
    arrays = enc.encode(vals, kind)
    assert len(arrays) == len(enc.columns("v", kind))
    return enc.decode(arrays, kind, len(vals))


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@given(st.lists(values, max_size=20))
def test_any_and_packed_layouts_round_trip_values_and_types(vals: list[Any]) -> None:
    for kind in (enc.ANY, enc.MIXED, enc.PACKED):
        back = round_trip(vals, kind)
        assert all(same(a, b) for a, b in zip(vals, back)) and len(back) == len(vals)


@given(st.lists(st.text(), max_size=20))
def test_text_batches_take_the_one_column_path(vals: list[str]) -> None:
    arrays = enc.encode(vals, enc.ANY)
    assert all(a.null_count == len(vals) for a in arrays[1:])
    assert round_trip(vals, enc.STR) == vals


@given(values, values)
def test_equal_values_get_equal_encodings(a: Any, b: Any) -> None:
    """groupBy on the columns groups like the engine's stores, which key by value."""
    for kind in (enc.ANY, enc.MIXED):
        cols = [x.to_pylist() for x in enc.encode([a, b], kind)]
        if same(a, b):
            assert [c[0] for c in cols] == [c[1] for c in cols]


@pytest.mark.parametrize("kind", [enc.ANY, enc.MIXED])
def test_int_float_bool_stay_apart(kind: str) -> None:
    cols = [x.to_pylist() for x in enc.encode([1, 1.0, True], kind)]
    rows = list(zip(*cols))
    assert len(set(rows)) == 3
    assert round_trip([1, 1.0, True], kind) == [1, 1.0, True]
    assert [type(v) for v in round_trip([1, 1.0, True], kind)] == [int, float, bool]


def test_values_that_can_not_be_stored_name_their_row() -> None:
    with pytest.raises(enc.EncodeError) as info:
        enc.encode(["a", {1, 2}], enc.ANY)
    assert info.value.index == 1 and "set" in str(info.value)
