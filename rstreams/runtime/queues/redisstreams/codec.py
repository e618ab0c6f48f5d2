"""Records as Redis stream entries, and offsets as entry ids.

A record is one entry with the fields ``t`` (timestamp, decimal milliseconds), ``k`` (the
key; absent when it is None), ``v`` (the value; absent when None, so ``b""`` stays
distinct) and ``h`` (headers as msgpack ``[[name, bytes], ...]``; absent when there are
none). Any Redis client reads them (``XRANGE key - +``).

Offsets are dense: offset ``N`` is the entry id ``0-(N+1)`` (``XADD key 0-* ...`` gives
the next sequence number of time 0, so the ids go 0-1, 0-2, ...). The end offset is the
sequence number of the stream's last generated id, which ``XDEL`` and ``XTRIM`` keep.

>>> args = encode_records([5], [b"k"], [b""], [(("h", b"1"),)])
>>> args
[8, b't', 5, b'k', b'k', b'v', b'', b'h', b'\\x91\\x92\\xa1h\\xc4\\x011']
>>> entry = (b"0-3", dict(zip(args[1::2], [str(a).encode() if isinstance(a, int) else a
...                                          for a in args[2::2]])))
>>> c = decode_entries([entry])
>>> list(c.offsets), c.timestamps, c.keys, c.values, c.headers
([2], [5], [b'k'], [b''], [(('h', b'1'),)])
>>> entry_id(2), offset_of(b"0-3")
('0-3', 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from operator import itemgetter
from typing import Any

import msgpack

from rstreams.runtime.queues._logformat import _RECORD_SHAPE
from rstreams.runtime.queues.base import RecordColumns

_BYTES = {bytes, type(None)}
_TS = itemgetter(b"t")


def entry_id(offset: int) -> str:
    """The stream entry id of ``offset``."""
    return f"0-{offset + 1}"


def offset_of(entry: bytes | str) -> int:
    """The offset of a stream entry id written by :func:`entry_id`."""
    ms, _, seq = (entry.decode() if isinstance(entry, bytes) else entry).partition("-")
    if ms != "0":
        raise ValueError(
            f"stream entry {entry!r} was not written by rstreams (its ids are 0-<n>); "
            "another program added entries to a stream of the job"
        )
    return int(seq) - 1


def check_columns(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[tuple],
) -> int:
    """The number of records, after the checks every broker makes (TypeError if bad)."""
    n = len(timestamps)
    if n and not n == len(keys) == len(values) == len(headers):
        raise TypeError(f"{_RECORD_SHAPE}; got columns of different lengths")
    if n and not set(map(type, timestamps)) <= {int}:
        raise TypeError(f"record timestamps must be int milliseconds; got {max(timestamps)!r}")
    if n and not (set(map(type, keys)) | set(map(type, values))) <= _BYTES:
        raise TypeError(f"{_RECORD_SHAPE}; got a key or value that is not bytes or None")
    return n


def encode_records(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[tuple],
) -> list[Any]:
    """The write script's arguments for checked columns: per record the number of
    field-name and value items, then those items (``t``, ``k``, ``v``, ``h``)."""
    out: list[Any] = []
    add, extend = out.append, out.extend
    packb = msgpack.packb
    for ts, k, v, h in zip(timestamps, keys, values, headers):
        if k is not None and v is not None and not h:  # the usual record
            extend((6, b"t", ts, b"k", k, b"v", v))
            continue
        fields: list[Any] = [b"t", ts]
        if k is not None:
            fields += (b"k", k)
        if v is not None:
            fields += (b"v", v)
        if h:
            try:
                fields += (b"h", packb(h, use_bin_type=True))
            except (TypeError, ValueError) as e:
                raise TypeError(f"{_RECORD_SHAPE}; {e}") from None
        add(len(fields))
        extend(fields)
    return out


def _headers(raw: bytes | None) -> tuple:
    if raw is None:
        return ()
    return tuple(tuple(p) for p in msgpack.unpackb(raw, raw=False, use_list=False))


def decode_entries(entries: Sequence[tuple[bytes, dict[bytes, bytes]]]) -> RecordColumns:
    """Columns of ``XRANGE`` entries (as redis-py returns them), in one pass per column."""
    if not entries:
        return RecordColumns(range(0), [], [], [], [])
    ids, fields = zip(*entries)
    first, last = offset_of(ids[0]), offset_of(ids[-1])
    dense = last - first == len(ids) - 1  # else compaction removed entries: gaps
    offsets: Sequence[int] = range(first, last + 1) if dense else list(map(offset_of, ids))
    timestamps = list(map(int, map(_TS, fields)))
    keys = [f.get(b"k") for f in fields]
    values = [f.get(b"v") for f in fields]
    has = [b"h" in f for f in fields]
    headers: list[tuple] = [()] * len(fields)
    if any(has):
        for i in compress(range(len(fields)), has):
            headers[i] = _headers(fields[i][b"h"])
    return RecordColumns(offsets, timestamps, keys, values, headers)


def record_bytes(fields: dict[bytes, bytes]) -> int:
    """The stored size of one entry's fields (what ``retention_bytes`` counts)."""
    return sum(len(k) + len(v) for k, v in fields.items())
