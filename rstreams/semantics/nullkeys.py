"""Null keys never match: the rule of joins and aggregations, the same on every backend.

A record whose join key is None (``where(fn)`` or ``equalTo(fn)`` returned None) is never
stored in a join's state and never matched, as in SQL and Kafka Streams (KIP-962): an
inner join drops it; on the outer side of a left join, or either side of an outer join, it
comes out at once, unmatched (the joiner called with None for the other side), without
waiting for its window to close. An aggregation (count, sum, min, max, reduce, aggregate,
windowed or not) skips a record whose grouping key is None.

Both are counted in the run's metrics under :data:`NULL_KEYS`. The embedded engine and
the Spark backend's per-queue replay both decide with :func:`null_key_pair`; Spark's batch
joins get the same result from SQL's own rule (a NULL join key equals nothing).
"""

from __future__ import annotations

from typing import Any

__all__ = ["NULL_KEYS", "null_key_pair"]

#: The metric counting records dropped or emitted unmatched for a None key.
NULL_KEYS = "null_keys"


def null_key_pair(join_type: str, side: str, value: Any) -> tuple[Any, Any] | None:
    """The joiner's ``(left, right)`` for a record of ``side`` ("L" or "R") whose join
    key is None, in a join of ``join_type`` ("inner", "left" or "outer"); None when the
    join drops the record.

    >>> null_key_pair("left", "L", "order-1")
    ('order-1', None)
    >>> null_key_pair("outer", "R", "payment-7")
    (None, 'payment-7')
    >>> null_key_pair("left", "R", "payment-7") is None
    True
    >>> null_key_pair("inner", "L", "order-1") is None
    True
    """
    if side == "L" and join_type in ("left", "outer"):
        return (value, None)
    if side == "R" and join_type == "outer":
        return (None, value)
    return None
