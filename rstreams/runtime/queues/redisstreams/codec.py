"""Records as Redis stream entries, and offsets as entry ids.

Offsets are dense from 0, and an entry's id says where it ends: an entry holding the
records up to offset ``N`` has the id ``0-(N+1)``, so a stream's last generated id
(which ``XDEL`` and ``XTRIM`` keep) is its end offset, ``XTRIM MINID 0-(N+1)`` removes
exactly the entries whose records all lie below ``N``, and ``XRANGE key 0-(N+1) +``
starts at the entry that holds offset ``N``.

The job's own topics hold records in batches: one entry of up to :data:`ENTRY_RECORDS`
records with the fields ``n`` (how many) and ``b`` (the records as msgpack columns).
Redis's cost is per entry (an ``XADD``, an entry in an ``XRANGE`` reply), not per byte,
so this is what makes a Redis-backed job nearly as fast as one on the file log; other
programs read and write streams through external sources and sinks
(:mod:`rstreams.dsl.external`), whose entries are plain fields. ``b`` is msgpack
objects one after the other::

    keys, offsets, timestamps, values, headers

keys (and offsets) first, so that compaction (a script on the server) decodes only them
to find each key's latest record; ``offsets`` is ``False`` unless compaction thinned
the entry out (then the offset of each record it kept). Keys and values are strings,
``False`` for None (so ``b""`` stays distinct); ``timestamps`` is one string of
little-endian int64s (exact, and the script slices it without reading it);
``headers`` is ``False`` when no record of the entry has any, else one msgpack blob
(or ``False``) per record. msgpack without the ``bin`` type: the server's cmsgpack
reads it.

An entry with the fields ``t`` (decimal timestamp), ``k``, ``v`` and ``h`` is one record
(streams written by rstreams before batches); reads and compaction still take it.

>>> blob = pack_entry([5, 6], [b"k", None], [b"", b"v"], [(), (("h", b"1"),)])
>>> c = decode_entries([b"0-2", b"2", blob], 0)
>>> c.offsets, c.timestamps, c.keys, c.values, c.headers
(range(0, 2), [5, 6], [b'k', None], [b'', b'v'], [(), (('h', b'1'),)])
>>> entry_id(2), offset_of(b"0-3")
('0-3', 2)
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import Any

import msgpack

from rstreams.runtime.queues._logformat import _RECORD_SHAPE, check_record_columns
from rstreams.runtime.queues.base import RecordColumns

#: Records per stream entry at most. Small enough that a read starting inside an entry
#: fetches little it does not return (a worker pulls 5,000 records at a time), large
#: enough that the per-entry work of the server is a small part of a record's cost.
ENTRY_RECORDS = 500

_BYTES = {bytes, type(None)}
_SWAP = sys.byteorder == "big"
_PACKER = msgpack.Packer(use_bin_type=False)
_FALSE = _PACKER.pack(False)


def entry_id(offset: int) -> str:
    """The id of a stream entry whose last record is at ``offset``."""
    return f"0-{offset + 1}"


def offset_of(entry: bytes | str) -> int:
    """The offset of the last record of the entry with id ``entry``."""
    ms, _, seq = (entry.decode() if isinstance(entry, bytes) else entry).partition("-")
    if ms != "0":
        raise ValueError(foreign(entry))
    return int(seq) - 1


def foreign(entry: bytes | str | None = None) -> str:
    """What is wrong with an entry rstreams did not write in a stream of the job."""
    which = "an entry" if entry is None else f"stream entry {entry!r}"
    return (
        f"{which} was not written by rstreams (its ids are 0-<n>, with fields n and b, "
        "or t): another program added entries to a stream of the job"
    )


def check_columns(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[tuple],
) -> int:
    """The number of records, after the checks every broker makes, and bytes-or-None
    keys and values (the server stores nothing else) (TypeError if bad)."""
    n = check_record_columns(timestamps, keys, values, headers)
    if n and not (set(map(type, keys)) | set(map(type, values))) <= _BYTES:
        raise TypeError(f"{_RECORD_SHAPE}; got a key or value that is not bytes or None")
    return n


def _pack_headers(h: tuple) -> bytes | bool:
    if not h:
        return False
    try:
        return msgpack.packb(h, use_bin_type=True)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{_RECORD_SHAPE}; {e}") from None


def _no_none(column: Sequence[bytes | None]) -> Sequence[bytes | bool]:
    return [False if x is None else x for x in column] if None in column else column  # type: ignore[return-value]


def _int64s(timestamps: Sequence[int]) -> bytes:
    try:
        ts = array("q", timestamps)
    except OverflowError:
        raise TypeError(f"{_RECORD_SHAPE}; a timestamp is outside int64") from None
    if _SWAP:
        ts.byteswap()
    return ts.tobytes()


def pack_entry(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[tuple],
) -> bytes:
    """The ``b`` field of an entry holding checked columns."""
    hs = list(map(_pack_headers, headers)) if any(headers) else False
    pack = _PACKER.pack
    return b"".join(
        (pack(_no_none(keys)), _FALSE, pack(_int64s(timestamps)), pack(_no_none(values)), pack(hs))
    )


def append_op(
    where: tuple[int, int, str],
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[tuple],
    entry_records: int = ENTRY_RECORDS,
) -> list[Any]:
    """The write script's ``"x"`` operation for checked columns: ``where`` (the stream's
    key index, the ends hash's, the queue's field in it), then the count and ``b``
    field of each entry."""
    n = len(timestamps)
    op: list[Any] = ["x", *where]
    for i in range(0, n, entry_records):
        j = min(i + entry_records, n)
        if i == 0 and j == n:
            op += [n, pack_entry(timestamps, keys, values, headers)]
        else:
            op += [j - i, pack_entry(timestamps[i:j], keys[i:j], values[i:j], headers[i:j])]
    return op


def pack_ops(ops: list[list[Any]]) -> bytes:
    """The operations as the write script unpacks them (bytes as msgpack raw strings:
    the server's cmsgpack knows no ``bin`` type)."""
    return msgpack.packb(ops, use_bin_type=False)


def _headers(raw: bytes) -> tuple:
    return tuple(tuple(p) for p in msgpack.unpackb(raw, raw=False, use_list=False))


def _none(column: list[Any]) -> list[Any]:
    return [None if x is False else x for x in column] if False in column else column


def decode_entries(flat: Sequence[Any], offset: int, limit: int | None = None) -> RecordColumns:
    """The records from ``offset`` on (at most ``limit``) of the entries the read script
    returns, flat: per batch entry its id, record count and ``b`` field; per one-record
    entry its id, ``0``, and its ``t``, ``k``, ``v`` and ``h`` fields (None if absent)."""
    unpacker = msgpack.Unpacker(raw=True, max_buffer_size=0)
    offsets: list[int] | range | None = None  # a range while they are dense
    ts: list[int] = []
    keys: list[Any] = []
    values: list[Any] = []
    headers: list[tuple] = []
    i = 0
    while i < len(flat):
        last = offset_of(flat[i])
        n = int(flat[i + 1])
        if n == 0:  # one record in fields
            t, k, v, h = flat[i + 2 : i + 6]
            i += 6
            offs: list[int] | range = range(last, last + 1)
            e_ts, e_keys, e_values = [int(t)], [k], [v]
            e_h: list[tuple] = [_headers(h) if h else ()]
        else:
            unpacker.feed(flat[i + 2])
            cols = list(unpacker)
            i += 3
            raw = array("q")
            raw.frombytes(cols[2])
            if _SWAP:
                raw.byteswap()
            e_ts = raw.tolist()
            e_keys, e_values = _none(cols[0]), _none(cols[3])
            e_h = [()] * n if cols[4] is False else [_headers(x) if x else () for x in cols[4]]
            offs = range(last - n + 1, last + 1) if cols[1] is False else cols[1]
        if offs[0] < offset:  # the entry holding ``offset`` starts before it
            skip = offset - offs[0] if isinstance(offs, range) else _index_from(offs, offset)
            offs, e_ts, e_keys = offs[skip:], e_ts[skip:], e_keys[skip:]
            e_values, e_h = e_values[skip:], e_h[skip:]
        if not len(offs):
            continue
        if offsets is None:
            offsets = offs
        elif isinstance(offsets, range) and isinstance(offs, range) and offs.start == offsets.stop:
            offsets = range(offsets.start, offs.stop)
        else:
            if not isinstance(offsets, list):
                offsets = list(offsets)
            offsets += offs
        ts += e_ts
        keys += e_keys
        values += e_values
        headers += e_h
        if limit is not None and len(ts) >= limit:
            break
    if offsets is None:
        return RecordColumns(range(0), [], [], [], [])
    c = RecordColumns(offsets, ts, keys, values, headers)
    return c.slice(0, limit) if limit is not None and len(c) > limit else c


def _index_from(offsets: Sequence[int], offset: int) -> int:
    return next((j for j, o in enumerate(offsets) if o >= offset), len(offsets))


def stored_bytes(c: RecordColumns) -> list[int]:
    """The bytes each record's key, value and timestamp take (what retention counts)."""
    return [len(k or b"") + len(v or b"") + 8 for k, v in zip(c.keys, c.values)]
