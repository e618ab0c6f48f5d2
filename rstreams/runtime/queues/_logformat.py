"""Bytes on disk of the file log: record-batch frames and sparse index entries.

Pure functions over file descriptors and buffers; no locking, no broker state. The
broker (:mod:`rstreams.runtime.queues.filelog`) decides what a bad frame means.

Frame (one per ``append`` call, little-endian, 36-byte header then the payload)::

    0   2s  magic            b"RL"
    2   u32 crc              zlib.crc32 of header bytes [6:36] followed by the payload
    6   u8  version          1
    7   u8  flags            0 (reserved)
    8   u32 payload length   bytes after the header
    12  u32 record count     >= 1
    16  i64 base offset      offset of the first record
    24  u32 last delta       offset of the last record - base offset (count - 1 when dense)
    28  i64 max timestamp    largest record timestamp (time retention)
    36  payload              msgpack array of 5 columns, one entry per record:
                             [offset deltas, timestamps, keys, values, headers]

Keys and values are msgpack ``bin`` or ``nil`` (so ``None`` and ``b""`` stay distinct);
a record's headers are an array of ``[name (str), value (bin)]`` pairs. Offset deltas are
strictly increasing from 0; a frame whose last delta is ``count - 1`` is dense. Columns
rather than rows because they encode and decode with C loops (``zip``/``map``), which makes
both about a third faster in CPython.

Index entry (``.index`` file, 16 bytes each): ``i64 offset, i64 position`` -- the base
offset of a frame and where the frame starts in the ``.log`` file. An entry is written for
a frame that starts at least ``index_interval_bytes`` after the previous entry (position 0
is implicit), so the rule can rebuild the same index by scanning the log.
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import msgpack

from rstreams.runtime.queues.base import LogRecord, RecordColumns

MAGIC = b"RL"
VERSION = 1
HEADER = struct.Struct("<2sIBBIIqIq")
HEADER_SIZE = HEADER.size  # 36
_CRC = struct.Struct("<I")
_COVERED = struct.Struct("<BBIIqIq")  # header fields after the crc: what the crc covers
CRC_FROM = 6
INDEX_ENTRY = struct.Struct("<qq")
MAX_PAYLOAD = 0xFFFF_FFFF
READ_BLOCK = 1 << 20

# One frame as the scanner sees it: start position, base offset, count, last delta, max
# timestamp, end position (start of the next frame), crc, the whole frame's bytes or None.
FrameInfo = tuple[int, int, int, int, int, int, int, "memoryview | None"]


class ReadBuffer:
    """The last block read from one file (``key`` names it), reused by the next scan."""

    __slots__ = ("data", "key", "start")

    def __init__(self) -> None:
        self.key: object = None
        self.start = 0
        self.data = b""

    def use(self, key: object) -> ReadBuffer:
        if key != self.key:
            self.key, self.start, self.data = key, 0, b""
        return self


class FrameError(Exception):
    """A frame at ``pos`` is not readable; ``incomplete`` when it runs past the readable end."""

    def __init__(self, pos: int, reason: str, *, incomplete: bool = False) -> None:
        super().__init__(f"{reason} at byte {pos}")
        self.pos = pos
        self.reason = reason
        self.incomplete = incomplete


_RECORD_SHAPE = (
    "records must be (timestamp: int, key: bytes | None, value: bytes | None, "
    "headers: tuple[tuple[str, bytes], ...]) tuples"
)


def encode_columns(deltas: Sequence[int], *columns: Sequence[object]) -> bytes:
    """The payload of a frame: offset deltas, timestamps, keys, values, headers."""
    try:
        return msgpack.packb((deltas, *columns), use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"{_RECORD_SHAPE}; {e}") from None


def record_columns(
    records: Iterable[tuple[int, bytes | None, bytes | None, tuple]],
) -> list[tuple] | None:
    """The four columns of (timestamp, key, value, headers) records; None when there are
    none, TypeError when they are not four fields."""
    columns = list(zip(*records))
    if not columns:
        return None
    if len(columns) != 4:
        raise TypeError(f"{_RECORD_SHAPE}; got {len(columns)} fields")
    return columns


def check_record_columns(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[tuple],
) -> int:
    """The number of records given as columns, after the checks every broker makes:
    columns of one length, int timestamps (TypeError if not)."""
    n = len(timestamps)
    if n and not n == len(keys) == len(values) == len(headers):
        raise TypeError(f"{_RECORD_SHAPE}; got columns of different lengths")
    if n and not set(map(type, timestamps)) <= {int}:
        raise TypeError(f"record timestamps must be int milliseconds; got {max(timestamps)!r}")
    return n


def encode_batch(
    records: Iterable[tuple[int, bytes | None, bytes | None, tuple]],
) -> tuple[bytes, int, int] | None:
    """Payload, record count and max timestamp of a dense batch; None when it is empty."""
    columns = record_columns(records)
    return None if columns is None else encode_column_batch(*columns)


def encode_column_batch(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[tuple],
) -> tuple[bytes, int, int] | None:
    """:func:`encode_batch` of records given as columns (of equal length)."""
    n = check_record_columns(timestamps, keys, values, headers)
    if not n:
        return None
    max_ts = max(timestamps)
    return encode_columns(list(range(n)), timestamps, keys, values, headers), n, max_ts


def encode_records(records: Sequence[LogRecord]) -> bytes:
    """The payload of a frame of records that keep their offsets (maybe sparse)."""
    base = records[0].offset
    return encode_columns(
        [r.offset - base for r in records],
        [r.timestamp for r in records],
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records],
    )


def build_frame(base: int, payload: bytes, count: int, last_delta: int, max_ts: int) -> bytes:
    """Header plus payload of one frame, crc included."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(
            f"a batch of {count} records encodes to {len(payload)} bytes; the frame limit is "
            f"{MAX_PAYLOAD}: append it in smaller batches"
        )
    try:
        covered = _COVERED.pack(VERSION, 0, len(payload), count, base, last_delta, max_ts)
    except struct.error:
        raise TypeError(f"timestamps must fit in 64 bits; got max timestamp {max_ts!r}") from None
    crc = zlib.crc32(payload, zlib.crc32(covered))
    return b"".join((MAGIC, _CRC.pack(crc), covered, payload))


def frame_crc_ok(frame: memoryview, crc: int) -> bool:
    return zlib.crc32(frame[HEADER_SIZE:], zlib.crc32(frame[CRC_FROM:HEADER_SIZE])) == crc


def decode_batch(payload: bytes, count: int) -> RecordColumns:
    """The columns of a payload :func:`encode_batch` made (offsets from 0)."""
    return decode_columns(memoryview(b"\0" * HEADER_SIZE + payload), 0, count, count - 1)


def decode_frame(frame: memoryview, base: int, count: int, last_delta: int) -> list[LogRecord]:
    """The records of a whole frame (header included), absolute offsets restored."""
    return decode_columns(frame, base, count, last_delta).records()


def decode_columns(frame: memoryview, base: int, count: int, last_delta: int) -> RecordColumns:
    """:func:`decode_frame` as columns (no object per record)."""
    try:
        deltas, timestamps, keys, values, headers = msgpack.unpackb(
            frame[HEADER_SIZE:], raw=False, use_list=False
        )
        columns = (timestamps, keys, values, headers)
        if not len(deltas) == count == min(map(len, columns)) == max(map(len, columns)):
            raise ValueError(f"columns of {len(deltas)} records; the header says {count}")
        if last_delta == count - 1:  # dense: deltas are 0..count-1
            offsets: Sequence[int] = range(base, base + count)
        else:
            offsets = [base + d for d in deltas]
        return RecordColumns(offsets, timestamps, keys, values, headers)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise FrameError(-1, f"undecodable payload ({e})") from None


def _parse_header(buf: bytes | memoryview, off: int, pos: int) -> tuple[int, ...]:
    magic, crc, version, flags, length, count, base, last_delta, max_ts = HEADER.unpack_from(
        buf, off
    )
    if magic != MAGIC:
        raise FrameError(pos, "bad magic (not the start of a frame)")
    if version != VERSION or flags != 0:
        raise FrameError(pos, f"unknown frame version {version} / flags {flags}")
    if count == 0 or last_delta < count - 1 or base < 0:
        raise FrameError(pos, f"inconsistent header (count {count}, last delta {last_delta})")
    return crc, length, count, base, last_delta, max_ts


def iter_frames(
    fd: int,
    pos: int,
    end: int,
    *,
    payload: bool = True,
    block: int = READ_BLOCK,
    buffer: ReadBuffer | None = None,
) -> Iterator[FrameInfo]:
    """Frames of ``fd`` from byte ``pos`` up to byte ``end``, read in large blocks.

    Yields a tuple per whole frame (see ``FrameInfo``; the frame's bytes are None when
    ``payload`` is false). Stops cleanly at ``end``; raises :class:`FrameError` at a frame
    that is malformed or that runs past ``end`` (``incomplete``). The crc is *not* checked
    here: callers check it (:func:`frame_crc_ok`) for the frames whose records they use.
    With a ``buffer`` (which must only ever hold bytes of this file that cannot change),
    bytes it holds are not read again and the last block read is left in it.
    """
    buf: bytes = b""
    buf_pos = pos
    if buffer is not None:
        buf, buf_pos = buffer.data, buffer.start
    while pos < end:
        off = pos - buf_pos
        if off < 0 or off + HEADER_SIZE > len(buf):
            if end - pos < HEADER_SIZE:
                raise FrameError(pos, "incomplete frame header", incomplete=True)
            buf = os.pread(fd, min(max(block, HEADER_SIZE), end - pos), pos)
            buf_pos, off = pos, 0
            if buffer is not None:
                buffer.data, buffer.start = buf, pos
            if len(buf) < HEADER_SIZE:
                raise FrameError(pos, "file ends inside a frame header", incomplete=True)
        crc, length, count, base, last_delta, max_ts = _parse_header(buf, off, pos)
        stop = pos + HEADER_SIZE + length
        if stop > end:
            raise FrameError(pos, f"frame of {length} bytes runs past the end", incomplete=True)
        frame = None
        if payload:
            if off + HEADER_SIZE + length > len(buf):
                buf = os.pread(fd, min(max(block, HEADER_SIZE + length), end - pos), pos)
                buf_pos, off = pos, 0
                if buffer is not None:
                    buffer.data, buffer.start = buf, pos
                if len(buf) < HEADER_SIZE + length:
                    raise FrameError(pos, "file ends inside a frame", incomplete=True)
            frame = memoryview(buf)[off : off + HEADER_SIZE + length]
        yield pos, base, count, last_delta, max_ts, stop, crc, frame
        pos = stop


def read_header(fd: int, pos: int) -> tuple[int, int] | None:
    """(base offset, frame end) of the frame at ``pos``, or None if no frame header is there."""
    buf = os.pread(fd, HEADER_SIZE, pos)
    if len(buf) < HEADER_SIZE:
        return None
    try:
        _crc, length, _count, base, _last, _ts = _parse_header(buf, 0, pos)
    except FrameError:
        return None
    return base, pos + HEADER_SIZE + length


def check_frame(fd: int, pos: int, end: int, min_base: int) -> bool:
    """Whether a whole, crc-valid frame with base offset >= ``min_base`` starts at ``pos``."""
    try:
        for _p, base, _n, _l, _t, _stop, crc, frame in iter_frames(fd, pos, end, block=0):
            assert frame is not None
            return base >= min_base and frame_crc_ok(frame, crc)
    except FrameError:
        return False
    return False


def find_frame_after(fd: int, pos: int, end: int, min_base: int) -> int | None:
    """Position of the first valid frame strictly after ``pos`` (and before ``end``), if any.

    Tells a damaged frame in the middle of a segment (valid data follows it) from a torn
    tail (nothing valid follows), by looking for the magic and checking header and crc.
    """
    at = pos + 1
    while at < end:
        chunk = os.pread(fd, min(READ_BLOCK, end - at), at)
        if not chunk:
            return None
        i = chunk.find(MAGIC)
        while i != -1:
            if check_frame(fd, at + i, end, min_base):
                return at + i
            i = chunk.find(MAGIC, i + 1)
        at += max(len(chunk) - 1, 1)  # keep one byte: the magic may straddle the chunks
    return None


# -- sparse index -----------------------------------------------------------------------


class SparseIndex:
    """In-memory index of one segment: parallel arrays of frame base offsets and positions."""

    __slots__ = ("interval", "last_pos", "offsets", "positions")

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.offsets = array("q")
        self.positions = array("q")
        self.last_pos = 0  # position of the last entry (0: the implicit first frame)

    def __len__(self) -> int:
        return len(self.offsets)

    def observe(self, base: int, pos: int) -> bool:
        """Note a frame at ``pos``; True if the rule adds an entry for it."""
        if pos - self.last_pos >= self.interval:
            self.offsets.append(base)
            self.positions.append(pos)
            self.last_pos = pos
            return True
        return False

    def truncate(self, n: int) -> None:
        del self.offsets[n:]
        del self.positions[n:]
        self.last_pos = self.positions[-1] if n else 0

    def to_bytes(self) -> bytes:
        return b"".join(INDEX_ENTRY.pack(o, p) for o, p in zip(self.offsets, self.positions))

    @classmethod
    def load(cls, path: Path, interval: int, size: int) -> tuple[SparseIndex, bool]:
        """The index in ``path`` and whether the file was whole and valid.

        Keeps the longest strictly increasing prefix of entries that point inside ``size``
        bytes of log; a missing file gives an empty index (and False).
        """
        idx = cls(interval)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return idx, False
        valid = len(data) % INDEX_ENTRY.size == 0
        last_off = last_pos = -1
        for off, p in INDEX_ENTRY.iter_unpack(data[: len(data) - len(data) % INDEX_ENTRY.size]):
            if off <= last_off or p <= last_pos or p >= size:
                valid = False
                break
            idx.offsets.append(off)
            idx.positions.append(p)
            last_off, last_pos = off, p
        idx.last_pos = last_pos if last_pos > 0 else 0
        return idx, valid

    @classmethod
    def scan(cls, fd: int, size: int, interval: int) -> SparseIndex:
        """Rebuild the index of a log file by walking its frame headers."""
        idx = cls(interval)
        try:
            for pos, base, *_ in iter_frames(fd, 0, size, payload=False):
                idx.observe(base, pos)
        except FrameError:
            pass  # the index covers the readable part; reading reports the damage
        return idx
