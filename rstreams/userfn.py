"""Helpers about user functions that every layer may use (the DSL, the planner and both
backends): naming a callback in messages, checking what a timestamp function returned,
and applying a function to a column of values with a per-value error path (for its
results, or for its side effect).

Imports only the standard library and :mod:`rstreams.errors`, so it sits below all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from inspect import CO_VARARGS, CO_VARKEYWORDS
from types import FunctionType
from typing import Any

__all__ = ["as_timestamp", "call_each", "describe_fn", "is_identity", "map_column"]

_IDENTITY = (lambda x: x).__code__


def describe_fn(fn: Any) -> str:
    """``module:line`` of a user callback, for error messages."""
    code = getattr(fn, "__code__", None)
    label = getattr(fn, "__qualname__", None) or type(fn).__name__
    if code is None:
        return label
    return f"{label} ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})"


def as_timestamp(value: Any) -> int:
    """What a ``selectTimestamp`` function returned, as epoch milliseconds; the same
    check (and message) on every backend."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            "a timestamp must be epoch milliseconds (int); "
            f"got {type(value).__name__} {value!r:.40}"
        )
    return int(value)


def is_identity(fn: Any) -> bool:
    """Whether ``fn`` is a plain function that returns its one argument, such as the
    ``lambda w: w`` of a word count's ``keyBy``: a step may use its input instead of
    calling it (the same objects, no side effect, no failure).

    >>> is_identity(lambda w: w), is_identity(lambda w: w.lower()), is_identity(str)
    (True, False, False)
    """
    if type(fn) is not FunctionType:
        return False
    code = fn.__code__
    return (
        code.co_code == _IDENTITY.co_code
        and code.co_argcount == 1
        and not code.co_kwonlyargcount
        and not code.co_flags & (CO_VARARGS | CO_VARKEYWORDS)
    )


def map_column(
    fn: Callable[[Any], Any],
    values: list[Any],
    failed: Callable[[int, Exception], None],
    column: Callable[[list[Any]], list[Any]] | None = None,
) -> tuple[list[Any], list[int] | None]:
    """``fn`` over ``values`` at C speed (``column(values)`` when given, a built-in's
    vectorized form, else ``map``); only if that raises, again one value at a time, with
    ``failed(i, error)`` for each value that raises (it may raise in turn, to stop).
    Returns the results and the indexes of the values that gave them: None when the
    fast pass gave them all. The engine's and Spark's record steps both apply their
    error policy through it.

    >>> bad = []
    >>> map_column(lambda v: 10 // v, [1, 0, 5], lambda i, e: bad.append(i))
    ([10, 2], [0, 2])
    >>> bad, map_column(str, [1, 2], lambda i, e: None)
    ([1], (['1', '2'], None))
    """
    try:
        return (column(values) if column is not None else list(map(fn, values))), None
    except Exception:
        pass
    results: list[Any] = []
    keep: list[int] = []
    for i, v in enumerate(values):
        try:
            results.append(fn(v))
        except Exception as e:
            failed(i, e)
            continue
        keep.append(i)
    return results, keep


def call_each(
    fn: Callable[[Any], Any], values: list[Any], failed: Callable[[int, Exception], None]
) -> list[int] | None:
    """``fn(v)`` once per value, for its side effect (a ``peek`` or ``foreach``: never
    called twice on a value), with ``failed(i, error)`` for each value that raises.
    Returns the indexes of the values that did not raise: None when none did.

    >>> call_each(lambda v: 1 // v, [1, 0, 2], lambda i, e: None)
    [0, 2]
    """
    bad: list[int] = []
    for i, v in enumerate(values):
        try:
            fn(v)
        except Exception as e:
            failed(i, e)
            bad.append(i)
    if not bad:
        return None
    skip = set(bad)
    return [i for i in range(len(values)) if i not in skip]
