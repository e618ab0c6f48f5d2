"""The aggregation objects of the semantics core, on plain values."""

from __future__ import annotations

from typing import Any

import pytest

from rstreams.dsl import nodes as n
from rstreams.semantics.aggregations import Aggregation


def fold(agg: Aggregation, values: list[Any]) -> Any:
    acc = None
    for v in values:
        acc = agg.update(acc, v)
    return acc


@pytest.mark.parametrize(
    ("op", "fn", "expected"),
    [
        ("count", None, 4),
        ("sum", len, 9),
        ("min", len, 1),
        ("max", len, 3),
        ("sum", None, "abcaab"),
    ],
)
def test_update_folds_raw_values(op: str, fn: Any, expected: Any) -> None:
    values = ["ab", "c", "aab", "xyz"] if fn is not None or op == "count" else ["ab", "ca", "ab"]
    assert fold(Aggregation.of_parts(op, fn), values) == expected


def test_reduce_and_aggregate() -> None:
    red = Aggregation.of_parts("reduce", lambda a, b: a + b)
    assert fold(red, [1, 2, 3]) == 6 and red.merge(1, 2) == 3
    agg = Aggregation.of_parts("aggregate", lambda acc, v: [*acc, v], list, lambda a, b: a + b)
    assert fold(agg, [1, 2]) == [1, 2] and agg.initial() == []
    assert agg.merge([1], [2]) == [1, 2]
    assert not agg.combinable and not red.combinable


@pytest.mark.parametrize("op", sorted(n.COMBINABLE))
def test_partials_merged_in_any_grouping_equal_the_fold(op: str) -> None:
    """Map-side combine: partials of any split, merged, give the record-by-record fold."""
    agg = Aggregation.of_parts(op, None if op == "count" else abs)
    values = [3, -7, 2, 9, -1]
    assert agg.combinable
    left = [agg.partial(v) for v in values[:2]]
    right = [agg.partial(v) for v in values[2:]]
    merged = agg.merge(fold_partials(agg, left), fold_partials(agg, right))
    assert merged == fold(agg, values)
    assert fold_partials(agg, [agg.partial(v) for v in values]) == fold(agg, values)


def fold_partials(agg: Aggregation, partials: list[Any]) -> Any:
    acc = None
    for p in partials:
        acc = agg.add_partial(acc, p)
    return acc


def test_fold_partials_per_key() -> None:
    agg = Aggregation.of_parts("max")
    into: dict[str, int] = {}
    prior = {"a": 5}
    agg.fold_partials(into, prior.get, ["a", "b"], [3, 4])
    assert into == {"a": 5, "b": 4}
    count = Aggregation.of_parts("count")
    assert count.adds and count.partial("anything") == 1
    count.fold_partials(into, {"a": 2}.get, ["a"], [3])
    assert into["a"] == 5


def test_fold_update_takes_partials_for_sum_min_max_only() -> None:
    assert Aggregation.of_parts("sum", len).fold_update(2, 3) == 5  # 3 is a partial already
    assert Aggregation.of_parts("count").fold_update(2, "x") == 3
    assert Aggregation.of_parts("reduce", max).fold_update(2, 3) == 3


def test_of_reads_the_dsl_node() -> None:
    node = n.AggregateNode(id=1, name="s", parents=(), op="sum", fn=len)
    agg = Aggregation.of(node)
    assert agg.op == "sum" and agg.update(None, "abc") == 3
    with pytest.raises(AssertionError):
        Aggregation.of_parts("median")
