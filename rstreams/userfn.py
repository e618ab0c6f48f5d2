"""Helpers about user functions that every layer may use (the DSL, the planner and both
backends): naming a callback in messages and checking what a timestamp function returned.

Imports only the standard library and :mod:`rstreams.errors`, so it sits below all of them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["as_timestamp", "describe_fn"]


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
