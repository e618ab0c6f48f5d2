"""Records as Redis stream entries, and offsets as entry ids.

A record is one entry with the fields ``t`` (timestamp, decimal milliseconds), ``k`` (the
key; absent when it is None), ``v`` (the value; absent when None, so ``b""`` stays
distinct) and ``h`` (headers as msgpack ``[[name, bytes], ...]``; absent when there are
none). Any Redis client reads them (``XRANGE key - +``).

Offsets are dense: offset ``N`` is the entry id ``0-(N+1)`` (``XADD key 0-* ...`` gives
the next sequence number of time 0, so the ids go 0-1, 0-2, ...). The end offset is the
sequence number of the stream's last generated id, which ``XDEL`` and ``XTRIM`` keep.

Between this process and the server's scripts (:mod:`.scripts`) records travel as
msgpack columns, packed and unpacked at C speed on both sides:

>>> op = append_op(2, [5, 6], [b"k", None], [b"", b"v"], [(), (("h", b"1"),)])
>>> op[:4], op[4:6]
(['x', 2, 2, ['5', '6']], [[b'k', None], [b'', b'v']])
>>> blob = msgpack.packb([[3, 4], [b"5", b"6"], [b"k", False], [b"", b"v"],
...                       [2, op[6][1]]])
>>> c = decode_read(blob)
>>> c.offsets, c.timestamps, c.keys, c.values, c.headers
(range(2, 4), [5, 6], [b'k', None], [b'', b'v'], [(), (('h', b'1'),)])
>>> entry_id(2), offset_of(b"0-3")
('0-3', 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from rstreams.runtime.queues._logformat import _RECORD_SHAPE
from rstreams.runtime.queues.base import RecordColumns

_BYTES = {bytes, type(None)}


def entry_id(offset: int) -> str:
    """The stream entry id of ``offset``."""
    return f"0-{offset + 1}"


def offset_of(entry: bytes | str) -> int:
    """The offset of a stream entry id written by :func:`entry_id`."""
    ms, _, seq = (entry.decode() if isinstance(entry, bytes) else entry).partition("-")
    if ms != "0":
        raise ValueError(foreign(entry))
    return int(seq) - 1


def foreign(entry: bytes | str) -> str:
    """What is wrong with an entry rstreams did not write in a stream of the job."""
    return (
        f"stream entry {entry!r} was not written by rstreams (its ids are 0-<n>, with a "
        "t field): another program added entries to a stream of the job"
    )


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


def _pack_headers(h: tuple) -> bytes | None:
    if not h:
        return None
    try:
        return msgpack.packb(h, use_bin_type=True)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{_RECORD_SHAPE}; {e}") from None


def append_op(
    key_index: int,
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[tuple],
) -> list[Any]:
    """The write script's ``"x"`` operation for checked columns. Timestamps travel as
    decimal text (exact beyond 2**53, where Lua's numbers are not)."""
    packed = list(map(_pack_headers, headers)) if any(headers) else None
    return ["x", key_index, len(timestamps), list(map(str, timestamps)), list(keys),
            list(values), packed]  # fmt: skip


def pack_ops(ops: list[list[Any]]) -> bytes:
    """The operations as the write script unpacks them (bytes as msgpack raw strings:
    the server's cmsgpack knows no ``bin`` type)."""
    return msgpack.packb(ops, use_bin_type=False)


def _headers(raw: bytes) -> tuple:
    return tuple(tuple(p) for p in msgpack.unpackb(raw, raw=False, use_list=False))


def decode_read(blob: bytes) -> RecordColumns:
    """Columns of the read script's reply: sequence numbers, timestamps, keys and values
    (False for an absent field), headers as ``[index from 1, blob, ...]``."""
    seqs, ts, keys, values, hs = msgpack.unpackb(blob, raw=True)
    n = len(seqs)
    if not n:
        return RecordColumns(range(0), [], [], [], [])
    dense = seqs[-1] - seqs[0] == n - 1  # else compaction removed entries: gaps
    offsets: Sequence[int] = range(seqs[0] - 1, seqs[-1]) if dense else [s - 1 for s in seqs]
    if False in keys:
        keys = [None if k is False else k for k in keys]
    if False in values:
        values = [None if v is False else v for v in values]
    headers: list[tuple] = [()] * n
    for i in range(0, len(hs), 2):
        headers[hs[i] - 1] = _headers(hs[i + 1])
    return RecordColumns(offsets, list(map(int, ts)), keys, values, headers)


def stored_bytes(c: RecordColumns) -> list[int]:
    """The bytes each record's key, value and timestamp take (what retention counts)."""
    return [
        len(k or b"") + len(v or b"") + len(str(t))
        for t, k, v in zip(c.timestamps, c.keys, c.values)
    ]
