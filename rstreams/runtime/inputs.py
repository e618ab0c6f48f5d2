"""Reading the inputs of a bounded run, the same on every backend: checking that every
source topic is bound to an input, opening input files and cutting them into chunks of
lines, and finding the file and line a record of a source topic was read from.

It sits below both backends (the embedded engine and Spark) and :mod:`rstreams.runner`,
which re-exports its public names.
"""

from __future__ import annotations

import bisect
import json
import os
import sys
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from rstreams.errors import ConfigError, InputLineTooLongError

if TYPE_CHECKING:
    from rstreams.planner.topology import Topology
    from rstreams.runtime.queues.broker import Broker

#: The header on the last record of each chunk of lines appended to a source topic:
#: ``<real path of the file>@<byte position of the chunk's end>``. Resuming reads how far
#: a file was ingested from it; :class:`InputLocator` finds a record's line with it.
INGEST_HEADER = "rstreams-ingest"

__all__ = [
    "INGEST_HEADER",
    "InputLocator",
    "check_inputs",
    "ingest_position",
    "line_chunks",
    "open_input",
]


class _Reader(Protocol):
    def read(self, n: int, /) -> bytes: ...


def line_chunks(
    f: _Reader,
    chunk_lines: int,
    *,
    last_partial: bool = True,
    block: int = 1 << 20,
    max_line: int | None = None,
    name: str = "input",
    start: int = 0,
) -> Iterator[tuple[list[bytes], int]]:
    """Chunks of ``chunk_lines`` lines (without their line ends: ``\n`` and any ``\r``
    before it) and the bytes consumed so far.

    The file is read in large blocks and split in C, not a line at a time; a line longer
    than a block is gathered in a list and joined once (linear in its length). A last
    line without a newline is a chunk of its own, kept as it is, when ``last_partial``
    (a finished file); otherwise it is left unread (a file still being written).

    ``max_line``: the longest line allowed, in bytes (None: no limit); a longer one is
    :class:`~rstreams.errors.InputLineTooLongError` naming ``name`` and the byte the line
    starts at (``start``: where in the file reading began).

    >>> import io
    >>> list(line_chunks(io.BytesIO(b"a\\nbb\\r\\nccc"), 2))
    [([b'a', b'bb'], 6), ([b'ccc'], 9)]
    >>> list(line_chunks(io.BytesIO(b"a\\n" + b"x" * 10 + b"\\n"), 2, max_line=8, name="in.txt"))
    Traceback (most recent call last):
    ...
    rstreams.errors.InputLineTooLongError: input 'in.txt': the line at byte 2 is longer ...
    """
    consumed = 0
    read = 0  # bytes read so far
    rest: list[bytes] = []  # the start of a line that spans blocks
    rest_len = 0
    pending: list[bytes] = []
    cr = False  # seen a \r: strip it from line ends

    while data := f.read(block):
        read += len(data)
        cut = data.rfind(b"\n")
        if cut < 0:
            rest.append(data)
            rest_len += len(data)
            if max_line is not None and rest_len > max_line:
                raise _too_long(name, start + read - rest_len, max_line, rest_len, whole=False)
            continue
        if rest:
            # (one join per line that spanned blocks, not one copy per block)
            cut += rest_len
            data = b"".join([*rest, data])
            rest, rest_len = [], 0
        tail = data[cut + 1 :]
        if tail:
            rest, rest_len = [tail], len(tail)
        body = data[:cut]
        cr = cr or b"\r" in body
        lines = body.split(b"\n")
        # (no line is too long in a body that is not; else name the first that is)
        if max_line is not None and len(body) > max_line and max(map(len, lines)) > max_line:
            i = next(i for i, line in enumerate(lines) if len(line) > max_line)
            at = read - len(data) + sum(map(len, lines[:i])) + i
            raise _too_long(name, start + at, max_line, len(lines[i]), whole=True)
        if max_line is not None and rest_len > max_line:  # (a limit below a block)
            raise _too_long(name, start + read - rest_len, max_line, rest_len, whole=False)
        pending.extend(lines)
        while len(pending) >= chunk_lines:
            chunk, size = _take(pending, chunk_lines, cr)
            consumed += size
            yield chunk, consumed
    if pending:
        chunk, size = _take(pending, len(pending), cr)
        consumed += size
        yield chunk, consumed
    if rest and last_partial:
        last = b"".join(rest)
        consumed += len(last)
        yield [last], consumed


def _take(pending: list[bytes], n: int, cr: bool) -> tuple[list[bytes], int]:
    """The first ``n`` pending lines, removed from ``pending`` (line ends stripped of a
    ``\\r`` when the input has any), and the bytes they took with their newlines. Once a
    chunk, not per line."""
    chunk = pending[:n]
    del pending[:n]
    size = sum(map(len, chunk)) + len(chunk)  # the lines and their newlines
    if cr:
        chunk = [line.rstrip(b"\r") for line in chunk]
    return chunk, size


def _too_long(name: str, at: int, max_line: int, size: int, whole: bool) -> InputLineTooLongError:
    """The error for a line of input ``name`` starting at byte ``at`` of the file that is
    longer than ``max_line`` (``size``: its length, or what was read of it so far)."""
    has = f"it has {size:,} bytes" if whole else f"{size:,} bytes of it read so far"
    return InputLineTooLongError(
        f"input {name!r}: the line at byte {at:,} is longer than {max_line:,} "
        f"bytes (--max-line-bytes): {has}; one line is one record, held whole in "
        "memory: raise the limit (--max-line-bytes N, or max_line_bytes=N) if the line "
        "is meant to be one record, else split the input into lines"
    )


def check_input_file(path: str) -> Path:
    """``path`` as a Path, unless it names nothing or a directory (the embedded runtimes
    read files; Spark reads directories and globs too)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"input file {path!r} does not exist")
    if p.is_dir():
        raise ConfigError(f"input {path!r} is a directory; give a file (one record per line)")
    return p


def open_input(path: str) -> tuple[BinaryIO, int | None]:
    if path == "-":
        return sys.stdin.buffer, None
    p = check_input_file(path)
    try:
        f = p.open("rb")
    except OSError as e:
        raise ConfigError(f"can not read input file {path!r}: {e.strerror}") from None
    return f, p.stat().st_size


def check_inputs(topology: Topology, inputs: dict[str, str]) -> None:
    """Every source topic bound to an input, and nothing else bound. (A topic copied
    from an external stream is bound to that stream.)"""
    external = topology.external_sources
    missing = [t for t in topology.source_topics if t not in inputs and t not in external]
    unknown = [t for t in inputs if t not in topology.source_topics]
    if bound := [t for t in inputs if t in external]:
        raise ConfigError(
            f"topic(s) {bound} are read from Redis streams "
            f"{[external[t].stream for t in bound]}; bind no input file to them"
        )
    if unknown:
        raise ConfigError(
            f"topic(s) {unknown} are not sources of {topology.job_id!r}; "
            f"its sources are {topology.source_topics}"
        )
    if missing:
        raise ConfigError(f"no input bound to source topic(s) {missing}; bind each to a file")


def ingest_position(value: bytes) -> tuple[str, int]:
    """``(real path, byte position)`` of an :data:`INGEST_HEADER` value: the JSON of the
    durable runtime's read mark (see ``rstreams.runtime.engine.io.ingest.ReadMark``), or
    ``<path>@<position>`` (the in-memory runtime's, and older jobs').

    >>> ingest_position(b'{"file":"/d/in.txt","position":6,"newline":true}')
    ('/d/in.txt', 6)
    >>> ingest_position(b"/d/in.txt@6")
    ('/d/in.txt', 6)
    """
    text = value.decode()
    if text.startswith("{"):
        doc = json.loads(text)
        return str(doc["file"]), int(doc["position"])
    path, _, at = text.rpartition("@")
    return path, int(at)


def ingest_mark(path: str, end: int) -> tuple[tuple[str, bytes], ...]:
    """The headers of the last record of a chunk of ``path`` that ends at byte ``end``."""
    return ((INGEST_HEADER, f"{os.path.realpath(path)}@{end}".encode()),)


class InputLocator:
    """The input file and line of a record of a source topic, for error messages.

    A chunk of lines is appended to one queue at once, one record per line, and its last
    record carries :data:`INGEST_HEADER` (the file and the byte where the chunk ends).
    The record at ``offset`` is so many lines before the first marked record at or after
    it; that record's line is the number of line ends in the file before the chunk's end.
    Only failures ask, so the work is done then, and remembered: the next failures
    (usually later in the same chunk, or later in the file) cost little.

        >>> from rstreams.runtime.queues.memory import MemoryBroker
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "in.txt")
        >>> _ = Path(path).write_bytes(b"a\\nb\\nc\\n")
        >>> broker = MemoryBroker()
        >>> broker.create_topic("lines", 1)
        >>> _ = broker.append("lines", 0, [(0, None, b"a", ()), (0, None, b"b", ()),
        ...                            (0, None, b"c", ingest_mark(path, 6))])
        >>> file, line = InputLocator(broker, ["lines"]).locate("lines", 0, 1)
        >>> file == os.path.realpath(path), line
        (True, 2)
    """

    #: Records read ahead at most for a chunk's end (a chunk has 20,000 lines by default).
    MAX_SCAN = 1_000_000

    def __init__(self, broker: Broker, topics: Collection[str]) -> None:
        self.broker = broker
        self.topics = frozenset(topics)
        #: (topic, queue) -> [(first offset looked at, chunk's last offset, file, end)];
        #: file None: no marker there.
        self._spans: dict[tuple[str, int], list[tuple[int, int, str | None, int]]] = {}
        #: file -> sorted [(byte position, line ends before it)].
        self._counted: dict[str, list[tuple[int, int]]] = {}

    def locate(self, topic: str, queue: int, offset: int) -> tuple[str, int] | None:
        """``(file, line)`` (line from 1) of the record at ``offset``, or None when it was
        not read from a file (another topic, standard input, a file no longer there)."""
        if topic not in self.topics:
            return None
        try:
            span = self._span(topic, queue, offset)
            if span is None:
                return None
            _, last, path, end = span
            return path, self._lines_to(path, end) - (last - offset)
        except (OSError, ValueError):  # best effort: the failure is what matters
            return None

    def where(self, topic: str, queue: int, offset: int) -> str | None:
        """``'<file> line <n>'`` of the record, or None (see :meth:`locate`)."""
        found = self.locate(topic, queue, offset)
        return None if found is None else f"{found[0]} line {found[1]}"

    def _span(self, topic: str, queue: int, offset: int) -> tuple[int, int, str, int] | None:
        spans = self._spans.setdefault((topic, queue), [])
        for first, last, path, end in spans:
            if first <= offset <= last:
                return None if path is None else (first, last, path, end)
        pos, stop = offset, min(self.broker.end_offset(topic, queue), offset + self.MAX_SCAN)
        while pos < stop:
            batch = self.broker.read(topic, queue, pos, min(4096, stop - pos))
            if not batch:
                break
            for rec in batch:
                for name, value in rec.headers:
                    if name == INGEST_HEADER:
                        path, at = ingest_position(value)
                        spans.append((offset, rec.offset, path, at))
                        return offset, rec.offset, path, at
            pos = batch[-1].offset + 1
        # A chunk is appended whole, marker included: records up to here never get one
        # (records not read from a file, as the test driver's), so say so at once again.
        spans.append((offset, pos - 1, None, 0))
        return None

    def _lines_to(self, path: str, end: int) -> int:
        """Lines of ``path`` up to byte ``end``, a chunk's end: its line ends, and a last
        line without one (the end of a file that has no final newline)."""
        counted = self._counted.setdefault(path, [(0, 0)])
        pos, ends = counted[bisect.bisect_right(counted, (end, end)) - 1]
        with open(path, "rb") as f:
            f.seek(pos)
            while pos < end:
                block = f.read(min(1 << 20, end - pos))
                if not block:
                    raise ValueError(f"{path} is shorter than when it was read")
                ends += block.count(b"\n")
                pos += len(block)
            if end:
                f.seek(end - 1)
                partial = f.read(1) != b"\n"
        bisect.insort(counted, (end, ends))
        return ends + 1 if end and partial else ends
