"""Helpers about user functions that every layer may use (the DSL, the planner and both
backends): naming a callback in messages and checking what a timestamp function returned.

Imports only the standard library and :mod:`rstreams.errors`, so it sits below all of them.
"""

from __future__ import annotations

from inspect import CO_VARARGS, CO_VARKEYWORDS
from types import FunctionType
from typing import Any

__all__ = ["as_timestamp", "describe_fn", "is_identity"]

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
