"""How arbitrary Python keys and values live in DataFrame columns.

User functions see and return any Python value, but Spark groups and aggregates typed
columns. A *field* (a record's key or its value) is stored in one of these layouts,
chosen by the compiler from what it knows about the field:

========== ======================================= ===================================
kind       columns (``<p>`` is ``k`` or ``v``)     holds
========== ======================================= ===================================
``none``   (none)                                  always None (e.g. keys of a source)
``str``    ``<p>_s`` string                        str (or None as null)
``long``   ``<p>_l`` bigint                        int (counts, lengths)
``any``    ``<p>_s`` ``<p>_l`` ``<p>_d`` ``<p>_b`` one non-null column per row: str,
           (string, bigint, double, binary)        64-bit int, float, or msgpack of
                                                   anything else (bool, bytes, tuple,
                                                   list, dict, big ints); all null is
                                                   None
``mixed``  ``<p>_s`` ``<p>_x`` (string, binary)     str, or msgpack of anything else:
                                                   keys computed by Python (two
                                                   columns to hash, not four; keys
                                                   are grouped, never summed)
``packed`` ``<p>_m`` binary                        msgpack of the whole value
========== ======================================= ===================================

Equal Python values get equal encodings (for ``any``: the same column and the same
content), so ``groupBy`` on the columns groups exactly as the embedded engine's state
stores (which key by value, serialized with msgpack for shuffles) do. Types survive the
round trip: ints stay ints, tuples stay tuples.

A record may also carry ``_o``, a binary *ordering key*: comparing two keys bytewise
gives the order in which the embedded engine would have seen the records (source
index, file, split, row, and one 4-byte position per flatMap output). Aggregations
that fold (reduce, aggregate) sort by it.

This module needs only pyarrow; it runs inside Spark's Python workers.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from rstreams.errors import SerdeError
from rstreams.serde import INTERNAL_SERDE

NONE, STR, LONG, ANY, MIXED, PACKED = "none", "str", "long", "any", "mixed", "packed"
KINDS = (NONE, STR, LONG, ANY, MIXED, PACKED)

#: kind -> (column suffix, Spark DDL type, Arrow type) per column
_LAYOUT: dict[str, tuple[tuple[str, str, pa.DataType], ...]] = {
    NONE: (),
    STR: (("s", "string", pa.string()),),
    LONG: (("l", "bigint", pa.int64()),),
    ANY: (
        ("s", "string", pa.string()),
        ("l", "bigint", pa.int64()),
        ("d", "double", pa.float64()),
        ("b", "binary", pa.binary()),
    ),
    MIXED: (("s", "string", pa.string()), ("x", "binary", pa.binary())),
    PACKED: (("m", "binary", pa.binary()),),
}

ORDER = "_o"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_pack = INTERNAL_SERDE.serialize
_unpack = INTERNAL_SERDE.deserialize


def columns(prefix: str, kind: str) -> list[str]:
    """Column names of a field: ``columns("k", "any") == ["k_s", "k_l", "k_d", "k_b"]``."""
    return [f"{prefix}_{suffix}" for suffix, _, _ in _LAYOUT[kind]]


def ddl(prefix: str, kind: str) -> list[str]:
    """``name type`` pieces of a Spark DDL schema for a field."""
    return [f"{prefix}_{suffix} {sql}" for suffix, sql, _ in _LAYOUT[kind]]


def arrow_fields(prefix: str, kind: str) -> list[pa.Field]:
    return [pa.field(f"{prefix}_{suffix}", arrow) for suffix, _, arrow in _LAYOUT[kind]]


def spark_type(column: str) -> str:
    """Spark SQL type of a layout column: ``spark_type("k_l") == "bigint"``."""
    suffix = column.split("_", 1)[1]
    return next(sql for layout in _LAYOUT.values() for s, sql, _ in layout if s == suffix)


def join_kinds(kinds: list[str]) -> str:
    """The layout that can hold the values of every given layout (for merge)."""
    distinct = set(kinds)
    if len(distinct) == 1:
        return kinds[0]
    if PACKED in distinct:
        return PACKED
    distinct.discard(NONE)  # None fits every other layout (as nulls)
    if len(distinct) == 1:
        return distinct.pop()
    return MIXED if MIXED in distinct else ANY


#: (from, to) layouts a DataFrame converts between by adding null columns.
_NATIVE_WIDENING = {(STR, ANY), (LONG, ANY), (STR, MIXED)}


def widens_natively(src: str, dst: str) -> bool:
    """Is ``dst`` ``src`` plus null columns (no Python needed to convert)?"""
    return src == dst or (src == NONE and dst != PACKED) or (src, dst) in _NATIVE_WIDENING


# -- Python values -> Arrow -------------------------------------------------------------


class EncodeError(SerdeError):
    """A value can not be put in a column; ``index`` is the row that failed."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def _packed(values: list[Any]) -> list[bytes]:
    out = []
    for i, v in enumerate(values):
        try:
            out.append(_pack(v))
        except SerdeError as e:
            raise EncodeError(str(e), i) from None
    return out


def encode(values: list[Any], kind: str) -> list[pa.Array]:
    """Arrow arrays of ``values`` in layout ``kind``."""
    n = len(values)
    if kind == NONE:
        return []
    if kind == STR:
        return [pa.array(values, pa.string())]
    if kind == LONG:
        return [pa.array(values, pa.int64())]
    if kind == PACKED:
        return [pa.array(_packed(values), pa.binary())]
    if kind == MIXED:
        return _encode_mixed(values)
    try:  # the common case, text in, text out: one pass of Arrow's own type inference
        text = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        text = None
    if text is not None and text.type == pa.string():
        return [text, pa.nulls(n, pa.int64()), pa.nulls(n, pa.float64()), pa.nulls(n, pa.binary())]
    types = set(map(type, values))
    if types == {int} and all(_INT64_MIN <= v <= _INT64_MAX for v in values):
        return [
            pa.nulls(n, pa.string()),
            pa.array(values, pa.int64()),
            pa.nulls(n, pa.float64()),
            pa.nulls(n, pa.binary()),
        ]
    s: list[Any] = [None] * n
    ints: list[Any] = [None] * n
    d: list[Any] = [None] * n
    b: list[Any] = [None] * n
    for i, v in enumerate(values):
        t = type(v)
        if t is str:
            s[i] = v
        elif t is int and _INT64_MIN <= v <= _INT64_MAX:
            ints[i] = v
        elif t is float:
            d[i] = v
        elif v is not None:
            try:
                b[i] = _pack(v)
            except SerdeError as e:
                raise EncodeError(str(e), i) from None
    return [
        pa.array(s, pa.string()),
        pa.array(ints, pa.int64()),
        pa.array(d, pa.float64()),
        pa.array(b, pa.binary()),
    ]


def _encode_mixed(values: list[Any]) -> list[pa.Array]:
    n = len(values)
    try:
        text = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        text = None
    if text is not None and text.type == pa.string():
        return [text, pa.nulls(n, pa.binary())]
    s: list[Any] = [None] * n
    x: list[Any] = [None] * n
    for i, v in enumerate(values):
        if type(v) is str:
            s[i] = v
        elif v is not None:
            try:
                x[i] = _pack(v)
            except SerdeError as e:
                raise EncodeError(str(e), i) from None
    return [pa.array(s, pa.string()), pa.array(x, pa.binary())]


# -- Arrow -> Python values -------------------------------------------------------------


def _pylist(arr: Any) -> list[Any]:
    return arr.to_pylist()


def decode(arrays: list[Any], kind: str, n: int) -> list[Any]:
    """Python values of ``n`` rows stored in layout ``kind`` (Arrow arrays or lists)."""
    if kind == NONE:
        return [None] * n
    if kind in (STR, LONG):
        return _pylist(arrays[0]) if not isinstance(arrays[0], list) else arrays[0]
    if kind == PACKED:
        col = arrays[0] if isinstance(arrays[0], list) else _pylist(arrays[0])
        return [None if m is None else _unpack(m) for m in col]
    if kind == MIXED:
        text, packed = arrays
        if not isinstance(packed, list) and packed.null_count == n:
            return text if isinstance(text, list) else _pylist(text)
        merged = list(text) if isinstance(text, list) else _pylist(text)
        for i, m in enumerate(packed if isinstance(packed, list) else _pylist(packed)):
            if m is not None:
                merged[i] = _unpack(m)
        return merged
    s, ints, d, b = arrays
    if all(not isinstance(a, list) and a.null_count == n for a in (ints, d, b)):
        return _pylist(s)
    out = list(s) if isinstance(s, list) else _pylist(s)
    for col, packed in ((ints, False), (d, False), (b, True)):
        if not isinstance(col, list) and col.null_count == n:
            continue
        vals = col if isinstance(col, list) else _pylist(col)
        for i, v in enumerate(vals):
            if v is not None:
                out[i] = _unpack(v) if packed else v
    return out


def be32(i: int) -> bytes:
    """4-byte big-endian position, appended to ordering keys by flatMap."""
    return i.to_bytes(4, "big")


def be64(i: int) -> bytes:
    return i.to_bytes(8, "big", signed=False)


def describe_order(o: bytes | None) -> tuple[int, str, int, int] | None:
    """(source index, file, split start, row id) encoded at the start of ``o``."""
    if not o:
        return None
    src = int.from_bytes(o[:2], "big")
    end = o.index(b"\x00", 2)
    path = o[2:end].decode("utf-8", "replace")
    block = int.from_bytes(o[end + 1 : end + 9], "big")
    row = int.from_bytes(o[end + 9 : end + 17], "big")
    return src, path, block, row


def hashable(key: Any) -> Any:
    """A deserialized key as a dict key (lists -> tuples, dicts -> sorted item tuples),
    exactly as the embedded runtime's ``run()`` builds its final tables."""
    if isinstance(key, list):
        return tuple(hashable(k) for k in key)
    if isinstance(key, dict):
        return tuple(sorted((k, hashable(v)) for k, v in key.items()))
    return key
