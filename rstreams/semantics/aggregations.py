"""Aggregations as objects: count, sum, min, max, reduce and aggregate.

Each class states one operation once: how a value updates an aggregate, how two partial
aggregates merge (map-side combine, session merging), whether partials exist at all
(:attr:`Aggregation.combinable`) and the Spark expression that computes it natively.
Both backends build them with :meth:`Aggregation.of` from the DSL node.

An aggregate of ``None`` means "none yet": the first value starts it.

>>> agg = Aggregation.of_parts("sum", fn=len)
>>> agg.update(agg.update(None, "ab"), "cde")
5
>>> agg.merge(agg.partial("ab"), agg.partial("x"))
3
>>> Aggregation.of_parts("count").update(None, "anything")
1
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from rstreams.dsl import nodes as n

__all__ = ["Aggregation"]

Fn = Callable[..., Any]
_MISSING = object()


class Aggregation:
    """One aggregation operation with its functions (``fn``, ``initializer``, ``merger``)."""

    op: ClassVar[str]
    #: count/sum/min/max: values turn into partials that merge in any grouping.
    combinable: ClassVar[bool] = False
    #: Partials merge with ``+`` (count, sum): callers may add without a call per merge.
    adds: ClassVar[bool] = False

    __slots__ = ("fn", "initializer", "merger", "to_partial")

    def __init__(self, fn: Fn | None = None, initializer: Fn | None = None,
                 merger: Fn | None = None) -> None:  # fmt: skip
        self.fn = fn
        self.initializer = initializer
        self.merger = merger
        #: value -> partial, or None when the partial is the value itself.
        self.to_partial = self._partial_fn(fn)

    def _partial_fn(self, fn: Fn | None) -> Fn | None:
        return None

    @staticmethod
    def of(node: n.AggregateNode | n.WindowAggregateNode) -> Aggregation:
        """The aggregation of an aggregate or window-aggregate step."""
        return Aggregation.of_parts(
            node.op, node.fn, node.initializer, getattr(node, "merger", None)
        )

    @staticmethod
    def of_parts(op: str, fn: Fn | None = None, initializer: Fn | None = None,
                 merger: Fn | None = None) -> Aggregation:  # fmt: skip
        """The aggregation ``op`` with the step's functions."""
        try:
            cls = _OPS[op]
        except KeyError:
            raise AssertionError(op) from None
        return cls(fn, initializer, merger)

    def initial(self) -> Any:
        """The aggregate before any value (None: the first value starts it)."""
        return None

    def update(self, acc: Any, value: Any) -> Any:
        """The aggregate ``acc`` (None: none yet) updated with a raw ``value``."""
        raise NotImplementedError

    def partial(self, value: Any) -> Any:
        """The partial aggregate of one raw value."""
        return value if self.to_partial is None else self.to_partial(value)

    def merge(self, a: Any, b: Any) -> Any:
        """Two partial aggregates combined (``a`` the older)."""
        raise NotImplementedError

    def add_partial(self, acc: Any, p: Any) -> Any:
        """The aggregate ``acc`` (None: none yet) updated with the partial ``p``."""
        return p if acc is None else self.merge(acc, p)

    def fold_partials(self, into: dict[Any, Any], prior: Callable[[Any, Any], Any],
                      keys: Iterable[Any], partials: Iterable[Any]) -> None:  # fmt: skip
        """``into[k]`` = partial ``p`` merged onto ``prior(k, <missing>)``, key by key
        (with ``+`` when :attr:`adds`: no call per key). Raises if a merge fails."""
        missing = _MISSING
        if self.adds:
            for k, p in zip(keys, partials):
                old = prior(k, missing)
                into[k] = p if old is missing else old + p
        else:
            merge = self.merge
            for k, p in zip(keys, partials):
                old = prior(k, missing)
                into[k] = p if old is missing else merge(old, p)

    @property
    def fold_update(self) -> Callable[[Any, Any], Any]:
        """update(acc, value) over values as a backend's partial step delivers them:
        sum/min/max after their function (partials), count/reduce/aggregate raw."""
        return self.update

    def result(self, acc: Any) -> Any:
        """What an aggregate is emitted as."""
        return acc

    def spark(self, functions: Any, column: Any) -> Any:
        """The Spark SQL aggregate over ``column`` of partials (``functions`` is
        ``pyspark.sql.functions``), or None when only a Python fold computes it."""
        return None

    def spark_exact(self, functions: Any, column: Any, suffix: str, batch: bool) -> Any:
        """A boolean Spark aggregate: whether :meth:`spark` over ``column`` (of the
        encoding's typed column ``suffix``: "l" ints, "d" floats, "s" str, "b" bytes)
        gives Python's result for the group; None when it never does (``batch``: a
        batch run, which can fold the other groups exactly instead)."""
        return None


class _Combinable(Aggregation):
    combinable = True
    __slots__ = ()

    def _partial_fn(self, fn: Fn | None) -> Fn | None:
        return fn

    def update(self, acc: Any, value: Any) -> Any:
        p = value if self.fn is None else self.fn(value)
        return p if acc is None else self.merge(acc, p)

    @property
    def fold_update(self) -> Callable[[Any, Any], Any]:
        return self.add_partial


class _Adding(_Combinable):
    """Partials that merge with ``+`` (count, sum)."""

    adds = True
    __slots__ = ()

    def merge(self, a: Any, b: Any) -> Any:
        return a + b

    def add_partial(self, acc: Any, p: Any) -> Any:
        # (the base's, without its call of merge: the test driver's every record)
        return p if acc is None else acc + p


class Count(_Adding):
    op = "count"
    __slots__ = ()

    def _partial_fn(self, fn: Fn | None) -> Fn | None:
        return _one

    def update(self, acc: Any, value: Any) -> Any:
        return 1 if acc is None else acc + 1

    def partial(self, value: Any) -> Any:
        return 1

    @property
    def fold_update(self) -> Callable[[Any, Any], Any]:
        return self.update  # a fold of count sees the records, not partials

    def spark(self, functions: Any, column: Any) -> Any:
        return functions.count(functions.lit(1))


class Sum(_Adding):
    op = "sum"
    __slots__ = ()

    def spark(self, functions: Any, column: Any) -> Any:
        return functions.try_sum(column)  # null on overflow: Python's ints do not

    def spark_exact(self, functions: Any, column: Any, suffix: str, batch: bool) -> Any:
        F = functions
        if suffix in ("b", "s") or (suffix == "d" and batch):
            return None  # float sums depend on order: a batch run folds them exactly
        pure = F.count(column) == F.count(F.lit(1))
        if suffix == "l":
            pure = pure & self.spark(F, column).isNotNull()  # overflowed
        return pure


class _MinMax(_Combinable):
    #: The builtin ``min`` or ``max``: it merges, and names the Spark function.
    pick: ClassVar[Any]
    __slots__ = ()

    def merge(self, a: Any, b: Any) -> Any:
        return self.pick(a, b)

    def spark(self, functions: Any, column: Any) -> Any:
        return getattr(functions, self.op)(column)

    def spark_exact(self, functions: Any, column: Any, suffix: str, batch: bool) -> Any:
        F = functions
        if suffix == "b":
            return None
        pure = F.count(column) == F.count(F.lit(1))
        if suffix == "d":  # NaN orders differently in Spark
            pure = pure & (F.sum(F.when(F.isnan(column), 1).otherwise(0)) == 0)
        return pure


class Min(_MinMax):
    op = "min"
    pick = min
    __slots__ = ()


class Max(_MinMax):
    op = "max"
    pick = max
    __slots__ = ()


class Reduce(Aggregation):
    op = "reduce"
    __slots__ = ()

    def update(self, acc: Any, value: Any) -> Any:
        assert self.fn is not None
        return value if acc is None else self.fn(acc, value)

    def merge(self, a: Any, b: Any) -> Any:
        assert self.fn is not None
        return self.fn(a, b)


class Aggregate(Aggregation):
    op = "aggregate"
    __slots__ = ()

    def initial(self) -> Any:
        assert self.initializer is not None
        return self.initializer()

    def update(self, acc: Any, value: Any) -> Any:
        assert self.fn is not None
        return self.fn(self.initial() if acc is None else acc, value)

    def merge(self, a: Any, b: Any) -> Any:
        # Only session windows merge aggregates: there the step has a merger.
        assert self.merger is not None
        return self.merger(a, b)


def _one(value: Any) -> int:
    return 1


_OPS: dict[str, type[Aggregation]] = {
    cls.op: cls for cls in (Count, Sum, Min, Max, Reduce, Aggregate)
}
assert set(_OPS) >= n.COMBINABLE
