"""What the ingest of a durable run has read of each input file, and whether the file
still holds it.

An input is known by its content, not by its path alone. Every chunk the supervisor
appends to a source topic carries, in a header of its last record, a :class:`ReadMark`:
the file (real path, device, inode), how many bytes of it were read, CRC-32s of the
first and of the last :data:`BLOCK` bytes of that prefix, and whether the prefix ended
with a newline. A later run resumes from the newest mark of each input; before it does,
:func:`what_changed` compares the file with the mark, and a file that no longer starts
with what the job read (rewritten, replaced, cut shorter, or a last line the job read
without its newline that goes on now) is refused with :func:`input_changed`: resuming
would count lines twice, skip them, or count a fragment of a line as a line. A file that
only grew is read on from the mark. A ``--follow`` run makes the same comparison each
time it looks for new lines, and also treats a new inode at the path as a replacement,
as ``tail -F`` does.

The mark lives in the same log record as the chunk's last line, so a crash can not
separate it from the records it describes: a torn append loses both (the log truncates
an unsynced tail on open), a whole one keeps both, and nothing else records ingest
progress that could disagree with the log.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "in.txt")
    >>> _ = open(path, "wb").write(b"alpha beta\\nhello wor")
    >>> with open(path, "rb") as f:
    ...     tap = Tap(f, os.path.realpath(path), 0, None)
    ...     mark = tap.mark(len(tap.read()))
    >>> mark.position, mark.newline
    (20, False)
    >>> ReadMark.decode(mark.encode()) == mark
    True
    >>> what_changed(path, mark) is None  # nothing changed
    True
    >>> _ = open(path, "ab").write(b"ld\\n")
    >>> what_changed(path, mark)
    'its last line, which the job read without a newline at byte 20, goes on now'
    >>> _ = open(path, "wb").write(b"alpha beta\\nhello wor\\nmore\\n")
    >>> what_changed(path, mark) is None  # the line read was whole: only its newline came
    True
"""

from __future__ import annotations

import json
import os
import zlib
from collections import deque
from typing import TYPE_CHECKING, BinaryIO

import attrs

from rstreams.errors import ConfigError
from rstreams.runtime.inputs import (  # a chunk's last record: its ReadMark
    INGEST_HEADER,
    ingest_position,
)

if TYPE_CHECKING:
    from rstreams.runtime.queues.broker import Broker

__all__ = [
    "BLOCK",
    "INGEST_HEADER",
    "ReadMark",
    "Tap",
    "input_changed",
    "last_mark",
    "what_changed",
]

#: Bytes checksummed at each end of what was read.
BLOCK = 4096


@attrs.frozen
class ReadMark:
    """What the ingest had read of one input file after one chunk."""

    #: The file's real path: which input the mark belongs to.
    file: str
    #: Bytes of the file read (the records up to this byte are in the log).
    position: int
    dev: int | None = None
    ino: int | None = None
    #: CRC-32 of bytes ``[0, min(position, BLOCK))``, and of ``[position - BLOCK, position)``.
    head: int | None = None
    tail: int | None = None
    #: The bytes read end with a newline (or none were read): the last line read is whole.
    newline: bool = True

    def encode(self) -> bytes:
        return json.dumps(attrs.asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> ReadMark:
        if not value.startswith(b"{"):
            # A job ingested by an earlier version: "<real path>@<position>", no content.
            return cls(*ingest_position(value))
        return cls(**json.loads(value))


class Tap:
    """Reads an input file from ``start`` (for :func:`~rstreams.runtime.inputs.line_chunks`)
    and gives the :class:`ReadMark` of any position it has read up to.

    The checksums come from the very bytes the lines were cut from, not from a second read
    of the file, which a writer could have changed in between. The blocks read are kept,
    not copied, until they end more than ``BLOCK`` bytes before the newest mark (the
    reader holds what it read past the mark anyway).
    """

    def __init__(self, f: BinaryIO, file: str, start: int, before: ReadMark | None) -> None:
        self._f = f
        self._file = file
        st = os.fstat(f.fileno())
        self._dev, self._ino = st.st_dev, st.st_ino
        base = max(0, start - BLOCK)
        f.seek(base)
        #: The blocks read, each with the file offset it starts at.
        self._blocks: deque[tuple[int, bytes]] = deque([(base, f.read(start - base))])
        self._end = f.tell()
        #: The head checksum once the prefix is longer than BLOCK (it no longer changes).
        self._head: int | None = None
        if start >= BLOCK:
            self._head = before.head if before is not None else None
            if self._head is None:  # (a mark written by an earlier version)
                self._head = zlib.crc32(os.pread(f.fileno(), BLOCK, 0))

    def read(self, n: int = -1, /) -> bytes:
        data = self._f.read(n)
        self._blocks.append((self._end, data))
        self._end += len(data)
        return data

    def _crc(self, lo: int, hi: int) -> int:
        crc = 0
        for at, data in self._blocks:
            a, b = max(lo, at), min(hi, at + len(data))
            if a < b:
                crc = zlib.crc32(memoryview(data)[a - at : b - at], crc)
        return crc

    def _byte(self, pos: int) -> int:
        for at, data in self._blocks:
            if at <= pos < at + len(data):
                return data[pos - at]
        raise IndexError(pos)

    def mark(self, position: int) -> ReadMark:
        """The mark of the bytes read up to ``position`` (at most what was read)."""
        head = self._head
        if head is None:  # nothing before BLOCK was forgotten yet
            head = self._crc(0, min(position, BLOCK))
            if position >= BLOCK:
                self._head = head
        lo = max(0, position - BLOCK)
        tail = self._crc(lo, position)
        newline = position == 0 or self._byte(position - 1) == 0x0A
        blocks = self._blocks
        while len(blocks) > 1 and blocks[0][0] + len(blocks[0][1]) <= lo:
            blocks.popleft()
        return ReadMark(self._file, position, self._dev, self._ino, head, tail, newline)


def last_mark(broker: Broker, topic: str, file: str) -> ReadMark | None:
    """The newest mark of ``file`` (a real path) in ``topic``, None if it has none.

    Chunks go round-robin over the topic's queues and each ends with its mark, so the
    newest one is the one that read furthest among the queues' last records."""
    queues = broker.queue_count(topic) or 0
    best: ReadMark | None = None
    for q in range(queues):
        end = broker.end_offset(topic, q)
        if end <= broker.start_offset(topic, q):
            continue
        (last,) = broker.read(topic, q, end - 1, 1)
        for name, value in last.headers:
            if name == INGEST_HEADER:
                mark = ReadMark.decode(value)
                if mark.file == file and (best is None or mark.position > best.position):
                    best = mark
    return best


def what_changed(path: str, mark: ReadMark, *, follow: bool = False) -> str | None:
    """How the file at ``path`` no longer holds what ``mark`` says the job read, or None
    when it still does (it may have grown). ``follow``: once the run read some of the
    file, another file at its path (a new inode) is a replacement, whatever it holds: a
    writer may still write to the file the run read, under another name."""
    try:
        f = open(path, "rb")  # noqa: SIM115
    except OSError as e:
        return f"it can not be read: {e.strerror}"
    with f:
        st = os.fstat(f.fileno())
        moved = (st.st_dev, st.st_ino) != (mark.dev, mark.ino)
        if follow and mark.position and mark.ino is not None and moved:
            return (
                f"another file was put at its path (inode {st.st_ino}; the job was reading "
                f"inode {mark.ino})"
            )
        pos = mark.position
        if st.st_size < pos:
            return f"it is {st.st_size} bytes long now, shorter than the {pos} bytes the job read"
        fd = f.fileno()
        if mark.head is not None and zlib.crc32(os.pread(fd, min(pos, BLOCK), 0)) != mark.head:
            return f"its first {min(pos, BLOCK)} bytes differ from what the job read"
        lo = max(0, pos - BLOCK)
        if mark.tail is not None and zlib.crc32(os.pread(fd, pos - lo, lo)) != mark.tail:
            return f"its bytes {lo}..{pos} differ from what the job read"
        if not mark.newline and st.st_size > pos and os.pread(fd, 1, pos) != b"\n":
            # (only its newline came since: the line read is the whole line after all)
            return f"its last line, which the job read without a newline at byte {pos}, goes on now"
    return None


def input_changed(path: str, what: str) -> ConfigError:
    """The error that refuses a run on an input that changed since the job read it."""
    return ConfigError(
        f"input {path!r} changed since the job read it: {what}; the job's table counts what "
        f"it read then; run with --fresh to start over"
    )
