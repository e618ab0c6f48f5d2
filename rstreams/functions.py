"""Built-in functions: use them wherever a step takes a function.

Each built-in is a small immutable callable. On the embedded engine and in the test
driver it runs as the plain Python shown in its docstring, a whole column at a time
where it can (``F.lower()`` over a batch of ``str`` is ``map(str.lower, values)``: no
Python call per record); the Spark backend compiles it to a native Spark SQL
expression instead, so no Python runs per record. Results are the
same on every backend (the Spark backend corrects the places where Java's regular
expressions or Unicode tables differ from Python's; see docs/spark.md).

    >>> from rstreams import StreamBuilder, functions as F
    >>> b = StreamBuilder("wc")
    >>> (b.source("lines")
    ...    .map(F.lower())
    ...    .flatMap(F.words())
    ...    .keyBy(F.identity())
    ...    .count()
    ...    .sink("counts"))
    >>> F.words()("Straße_1 naïve, ΟΔΟΣ!")
    ['Straße_1', 'naïve', 'ΟΔΟΣ']
    >>> F.lower()("ΟΔΟΣ")
    'οδος'
    >>> F.json_field("user")('{"user": "ada", "n": 1}')
    'ada'
    >>> F.findall(r"\\d+")
    F.findall('\\\\d+')

A built-in raises ``TypeError`` when given a value of the wrong type (``F.lower()(5)``)
and ``ValueError`` on bad input (``F.json_field("a")("{oops")``); the step's
``on_error`` policy then applies as for any user function.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from itertools import repeat
from typing import Any

import attrs

__all__ = [
    "Builtin",
    "Findall",
    "Identity",
    "JsonField",
    "Length",
    "Lower",
    "Strip",
    "Upper",
    "findall",
    "identity",
    "json_field",
    "length",
    "lower",
    "strip",
    "upper",
    "words",
]


@functools.cache
def _py_whitespace() -> str:
    return "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())


def __getattr__(name: str) -> Any:
    # ``PY_WHITESPACE``: the characters ``str.strip()`` with no argument removes (those
    # of ``str.isspace``). Computed on first use: scanning every code point costs 0.1 s,
    # which every process start (CLI, workers) would otherwise pay.
    if name == "PY_WHITESPACE":
        return _py_whitespace()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _require_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} expects a str; got {type(value).__name__} {value!r:.60}")
    return value


class Builtin:
    """Base of the built-in functions (a marker the backends dispatch on)."""

    __slots__ = ()

    def __call__(self, value: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def column(self, values: list[Any]) -> list[Any]:
        """``[self(v) for v in values]``; built-ins override it with a C-level loop for
        the usual input (all ``str``). Raises if any value fails; the engine then goes
        record by record to apply the error policy."""
        return list(map(self, values))


def _all_str(values: list[Any]) -> bool:
    return set(map(type, values)) <= {str}


def _str_column(fn: Builtin, method: Any, values: list[Any]) -> list[Any]:
    # Exactly str (not a subclass that may override the method): call the method
    # itself from a C loop, without the built-in's Python layer.
    return list(map(method, values)) if _all_str(values) else list(map(fn, values))


@attrs.frozen(repr=False)
class Identity(Builtin):
    """``value`` unchanged; ``keyBy(F.identity())`` keys a record by its value."""

    def __call__(self, value: Any) -> Any:
        return value

    def column(self, values: list[Any]) -> list[Any]:
        return values  # columns are never changed in place

    def __repr__(self) -> str:
        return "F.identity()"


@attrs.frozen(repr=False)
class Lower(Builtin):
    """``value.lower()`` (full Unicode case mapping: ``'İ'`` -> ``'i̇'``, final sigma)."""

    def __call__(self, value: Any) -> str:
        return _require_str(value, "F.lower()").lower()

    def column(self, values: list[Any]) -> list[Any]:
        return _str_column(self, str.lower, values)

    def __repr__(self) -> str:
        return "F.lower()"


@attrs.frozen(repr=False)
class Upper(Builtin):
    """``value.upper()`` (full Unicode case mapping: ``'ß'`` -> ``'SS'``)."""

    def __call__(self, value: Any) -> str:
        return _require_str(value, "F.upper()").upper()

    def column(self, values: list[Any]) -> list[Any]:
        return _str_column(self, str.upper, values)

    def __repr__(self) -> str:
        return "F.upper()"


@attrs.frozen(repr=False)
class Strip(Builtin):
    """``value.strip(chars)``: without ``chars``, Unicode whitespace (``str.isspace``)."""

    chars: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.chars is not None and not isinstance(self.chars, str):
            raise TypeError(f"F.strip(chars) expects a str or None; got {self.chars!r}")

    def __call__(self, value: Any) -> str:
        return _require_str(value, "F.strip()").strip(self.chars)

    def column(self, values: list[Any]) -> list[Any]:
        if not _all_str(values):
            return list(map(self, values))
        return list(map(str.strip, values, repeat(self.chars)))

    def __repr__(self) -> str:
        return "F.strip()" if self.chars is None else f"F.strip({self.chars!r})"


@attrs.frozen(repr=False)
class Length(Builtin):
    """``len(value)`` of a str: the number of code points."""

    def __call__(self, value: Any) -> int:
        return len(_require_str(value, "F.length()"))

    def column(self, values: list[Any]) -> list[Any]:
        return _str_column(self, len, values)

    def __repr__(self) -> str:
        return "F.length()"


@attrs.frozen(repr=False)
class Findall(Builtin):
    """``re.findall(pattern, value, flags)``: every match, left to right.

    With one group in the pattern, the group's text (``''`` where it did not take part);
    with several, tuples of them (as :func:`re.findall`).
    """

    pattern: str
    flags: int = 0
    _regex: re.Pattern[str] = attrs.field(init=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise TypeError(f"F.findall() expects a str pattern; got {self.pattern!r:.60}")
        try:
            regex = re.compile(self.pattern, int(self.flags))
        except re.error as e:
            raise ValueError(
                f"F.findall({self.pattern!r}): invalid regular expression: {e}"
            ) from None
        object.__setattr__(self, "_regex", regex)

    @property
    def regex(self) -> re.Pattern[str]:
        """The compiled pattern."""
        return self._regex

    def __call__(self, value: Any) -> list[Any]:
        return self._regex.findall(_require_str(value, repr(self)))

    def column(self, values: list[Any]) -> list[Any]:
        return _str_column(self, self._regex.findall, values)

    def __repr__(self) -> str:
        flags = f", flags={re.RegexFlag(self.flags)!s}" if self.flags else ""
        return f"F.findall({self.pattern!r}{flags})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Findall, (self.pattern, self.flags))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {k!r}")
            seen.add(k)
    return obj


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
_LONE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]", re.ASCII)


@attrs.frozen(repr=False)
class JsonField(Builtin):
    """Field ``name`` of a JSON object given as text: a str, int, float, bool or None.

    Strict, and the same on every backend: the text must hold a JSON object (text after
    it is ignored, as Spark's ``parse_json`` does); duplicate keys, ``NaN`` and lone
    surrogates are invalid. A missing field or ``null`` gives None. Integers outside
    the 64-bit range come back as float, and ``-0.0`` as ``0.0``. A field holding an
    object or an array is an error: decode those with ``.map(json.loads)``.
    """

    name: str

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"F.json_field(name) expects a str; got {self.name!r:.60}")

    def __call__(self, value: Any) -> Any:
        text = _require_str(value, repr(self)).lstrip(" \t\n\r")
        try:
            obj, _ = _DECODER.raw_decode(text)
            if _LONE_SURROGATE.search(text):
                json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except (ValueError, UnicodeEncodeError) as e:
            reason = "lone surrogate" if isinstance(e, UnicodeEncodeError) else str(e)
            raise ValueError(f"{self!r}: invalid JSON ({reason}): {value[:60]!r}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{self!r} expects a JSON object; got {type(obj).__name__} {text:.60}")
        v = obj.get(self.name)
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, int):
            return v if _INT64_MIN <= v <= _INT64_MAX else float(v)
        if isinstance(v, float):
            return v + 0.0  # -0.0 -> 0.0
        raise ValueError(
            f"{self!r}: the field holds a JSON {'object' if isinstance(v, dict) else 'array'}; "
            "json_field returns strings, numbers, booleans and null only "
            "(decode nested values with .map(json.loads))"
        )

    def __repr__(self) -> str:
        return f"F.json_field({self.name!r})"


def identity() -> Identity:
    """The value itself: ``keyBy(F.identity())``."""
    return Identity()


def lower() -> Lower:
    """``str.lower`` of the value."""
    return Lower()


def upper() -> Upper:
    """``str.upper`` of the value."""
    return Upper()


def strip(chars: str | None = None) -> Strip:
    """``str.strip(chars)`` of the value."""
    return Strip(chars)


def length() -> Length:
    """``len`` of a str value."""
    return Length()


def findall(pattern: str, flags: int | re.RegexFlag = 0) -> Findall:
    """``re.findall(pattern, value, flags)``; use with ``flatMap``."""
    return Findall(pattern, int(flags))


def words(pattern: str = r"\w+") -> Findall:
    """The words of a str (runs of Unicode word characters): ``re.findall(r"\\w+", v)``."""
    return Findall(pattern)


def json_field(name: str) -> JsonField:
    """Field ``name`` of a JSON object text (see :class:`JsonField`)."""
    return JsonField(name)
