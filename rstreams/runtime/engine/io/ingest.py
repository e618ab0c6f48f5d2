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

import contextlib
import json
import os
import time
import zlib
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

import attrs

from rstreams.errors import ConfigError
from rstreams.runtime.inputs import (  # a chunk's last record: its ReadMark
    INGEST_HEADER,
    ingest_position,
)
from rstreams.runtime.positions import line_headers

if TYPE_CHECKING:
    from rstreams.runtime.queues.broker import Broker

__all__ = [
    "AHEAD_CHUNKS",
    "BLOCK",
    "INGEST_HEADER",
    "Ingest",
    "Input",
    "ReadMark",
    "Tap",
    "estimate_lines",
    "input_changed",
    "last_headers",
    "last_mark",
    "lines_per_chunk",
    "read_marks",
    "record_input_end",
    "what_changed",
]

#: Bytes checksummed at each end of what was read.
BLOCK = 4096

#: The fewest lines a chunk is cut down to so that a short input still reaches every
#: queue of its topic: each chunk costs an fsync and a mark, and a task a batch.
MIN_SPREAD_LINES = 100

#: On a broker that holds records in memory (Redis), a source queue that holds this many
#: chunks (``chunk_lines`` records each) is trimmed to what its readers committed before
#: the next chunk, which waits while the job's group has not committed that many: the
#: server holds at most one chunk more per queue, not the whole input (docs/redis.md).
#: Four, not fewer: a worker that has read every chunk held waits for its next commit
#: and then the ingest's next chunk (with two, a word count on Redis ran 14 to 20 s from
#: one run to the next; with four, 14.5 to 16). The file log keeps its source topics on
#: disk, whole, and its ingest runs ahead freely.
AHEAD_CHUNKS = 4

#: Bytes of an input sampled to estimate how many lines are left to read.
SAMPLE = 1 << 16


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
    best: ReadMark | None = None
    for value in last_headers(broker, topic, INGEST_HEADER):
        mark = ReadMark.decode(value)
        if mark.file == file and (best is None or mark.position > best.position):
            best = mark
    return best


def held_before(broker: Broker, topics: list[str]) -> tuple[int, list[str]]:
    """What a job's source topics hold from earlier runs: the records (those purged
    included) and the input files read into them (real paths, sorted)."""
    records, files = 0, set()
    for topic in topics:
        for q in range(broker.queue_count(topic) or 0):
            records += broker.end_offset(topic, q)
        for value in last_headers(broker, topic, INGEST_HEADER):
            with contextlib.suppress(ValueError, KeyError):
                files.add(ReadMark.decode(value).file)
    return records, sorted(files)


def resumed_text(job: str, where: str, records: int, files: list[str], now: list[str]) -> str:
    """The line a run that resumes a job's earlier state says at its start."""
    read = f" (read from {', '.join(files)})" if files else ""
    more = "the lines of " + ", ".join(now) + " it has not read yet" if now else "nothing new"
    return (
        f"job {job!r} resumes its earlier state in {where}: {records:,} input records "
        f"already taken in{read}; this run adds {more}, and the table holds both. Run "
        "with --fresh to start over"
    )


def last_headers(broker: Broker, topic: str, header: str) -> Iterator[bytes]:
    """The values of ``header`` on the last record of each queue of ``topic``: where
    an ingest records how far it got."""
    for q in range(broker.queue_count(topic) or 0):
        end = broker.end_offset(topic, q)
        if end <= broker.start_offset(topic, q):
            continue
        (last,) = broker.read(topic, q, end - 1, 1)
        yield from (value for name, value in last.headers if name == header)


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


def lines_per_chunk(lines: int, queues: int, chunk_lines: int) -> int:
    """Lines in each chunk of an input of about ``lines`` lines over ``queues`` queues:
    ``chunk_lines`` for a long input, fewer for a short one so that chunks go round-robin
    over every queue (each queue's task gets a share of the first stage), but never
    fewer than :data:`MIN_SPREAD_LINES` (or ``chunk_lines``, when it is smaller).

    >>> lines_per_chunk(1_000_000, 8, 20_000), lines_per_chunk(10_000, 8, 20_000)
    (20000, 1250)
    >>> lines_per_chunk(300, 8, 20_000), lines_per_chunk(300, 8, 2)
    (100, 2)
    """
    share = -(-lines // max(1, queues))  # rounded up: at most one chunk per queue
    return min(chunk_lines, max(MIN_SPREAD_LINES, share))


def estimate_lines(fd: int, start: int, size: int) -> int:
    """Lines in bytes ``start..size`` of a file: counted when they fit in
    :data:`SAMPLE`, else from the newlines of the first :data:`SAMPLE` bytes."""
    sample = os.pread(fd, min(SAMPLE, max(0, size - start)), start)
    newlines = sample.count(b"\n")
    if len(sample) < SAMPLE:
        return newlines + (1 if sample and not sample.endswith(b"\n") else 0)
    return (size - start) * max(1, newlines) // SAMPLE


def input_changed(path: str, what: str) -> ConfigError:
    """The error that refuses a run on an input that changed since the job read it."""
    return ConfigError(
        f"input {path!r} changed since the job read it: {what}; the job's table counts what "
        f"it read then; run with --fresh to start over"
    )


def read_marks(broker: Broker, inputs: dict[str, str]) -> dict[str, ReadMark | None]:
    """What the job read of each input (source topic -> its file), by the log. Refuses
    (ConfigError) an input that no longer holds that: resuming would count lines twice,
    skip them, or count a fragment of a line as a line."""
    read: dict[str, ReadMark | None] = {}
    for topic, path in inputs.items():
        mark = read[topic] = last_mark(broker, topic, os.path.realpath(path))
        if mark is not None and (what := what_changed(path, mark)) is not None:
            raise input_changed(path, what)
    return read


class Input:
    """One input file being appended to its source topic."""

    def __init__(
        self,
        topic: str,
        path: str,
        queues: int,
        read: ReadMark | None,
        base: int | None = None,
        max_line: int | None = None,
    ) -> None:
        self.topic = topic
        #: The longest line allowed, in bytes (``--max-line-bytes``; None: no limit).
        self.max_line = max_line
        #: Each line's position goes in a header (``base | byte``; see
        #: ``rstreams.runtime.positions``) when not None: the topic feeds a temporal join.
        self.base = base
        self.path = path
        self.id = os.path.realpath(path)
        self.queues = queues
        st = os.stat(path)
        #: What the job has read of the file (in the log: the last chunk's header).
        self.mark = read or ReadMark(self.id, 0, st.st_dev, st.st_ino)
        self.position = self.mark.position
        self.lines = 0
        #: Each queue's end when the ingest last reached the end of the file, recorded.
        self.ended_at: dict[int, int] = {}
        self.size = st.st_size

    def current_size(self) -> int:
        """The file's size now (a followed file grows), never below what was read."""
        with contextlib.suppress(OSError):  # (moved away: what it had is what it has)
            self.size = os.path.getsize(self.path)
        return max(self.size, self.position)

    def check(self, follow: bool = False) -> None:
        """Refuse a file that no longer holds what the job read of it (ConfigError)."""
        what = what_changed(self.path, self.mark, follow=follow)
        if what is not None:
            raise input_changed(self.path, what)

    def chunks(
        self, chunk_lines: int, follow: bool = False
    ) -> Iterator[tuple[list[bytes], ReadMark]]:
        """Chunks of whole lines from the current position (at most ``chunk_lines``; fewer
        to spread a short input over the queues), each with the mark of what was read up
        to its end. A last line without a newline is taken as a line at the end of
        a bounded file (its mark says so: a later run refuses the file if the line goes
        on), but left for later when following a file that is still being written."""
        from rstreams.runtime.inputs import line_chunks

        start = self.position  # the caller moves position on as chunks are appended
        with open(self.path, "rb") as f:
            if not self.mark.newline and os.pread(f.fileno(), 1, start) == b"\n":
                # A line read without its newline got just that newline since (anything
                # else fails the check): the line was whole; read on after it.
                start += 1
            # A short input in chunks of chunk_lines would all go to one queue.
            left = estimate_lines(f.fileno(), start, os.fstat(f.fileno()).st_size)
            per_chunk = lines_per_chunk(left, self.queues, chunk_lines)
            tap = Tap(f, self.id, start, self.mark)
            chunks = line_chunks(
                tap, per_chunk, last_partial=not follow, max_line=self.max_line,
                name=self.path, start=start,
            )  # fmt: skip
            for lines, consumed in chunks:
                yield lines, tap.mark(start + consumed)


def record_input_end(
    broker: Broker, job_id: str, topic: str, queues: int, ended_at: dict[int, int]
) -> None:
    """The ingest reached the end of the input of ``topic`` (for now, if following it):
    record where each of its queues ends, so that tasks that have read that far stop
    holding event time back (see the watermarks module). ``ended_at``: what was recorded
    last, per queue (updated)."""
    from rstreams.runtime.engine.operators.watermarks import ingest_group

    group = ingest_group(job_id)
    for q in range(queues):
        end = broker.end_offset(topic, q)
        if ended_at.get(q) != end:
            broker.commit(group, topic, q, end)
            ended_at[q] = end


class Ingest:
    """Appends input files to their source topics in chunks of whole lines, round-robin
    over each topic's queues (a short input in shorter chunks, so that it reaches every
    queue: see :func:`lines_per_chunk`). Every chunk's last record carries the mark of
    what was read up to its end (the log keeps both or neither: a crash can not make them
    disagree). Following input (``follow``), it looks for lines appended since every half
    second, first checking that each file still holds what was read of it, as ``tail -F``
    does: a file truncated, rewritten or replaced stops the run."""

    def __init__(
        self,
        broker: Broker,
        job_id: str,
        inputs: list[Input],
        *,
        chunk_lines: int,
        follow: bool = False,
        max_rate: float | None = None,
        max_ahead: int | None = None,
    ) -> None:
        self.broker = broker
        #: Records a source queue may hold that the job's group has not committed yet
        #: before the next chunk for it waits (None: no bound); see :meth:`_ahead`.
        self.max_ahead = max_ahead
        #: Per (topic, queue): its end after this run's last append, and its start.
        self._ahead_of: dict[tuple[str, int], tuple[int, int]] = {}
        #: Per (topic, queue): the job's committed position it was last trimmed at.
        self._trimmed_at: dict[tuple[str, int], int] = {}
        self.job_id = job_id
        self.inputs = inputs
        self.chunk_lines = chunk_lines
        self.follow = follow
        #: Lines per second, None = as fast as it goes (tests slow it down).
        self.max_rate = max_rate
        self.pending = [(i, i.chunks(chunk_lines, follow)) for i in inputs]
        self._rr = 0
        self._next_look = 0.0
        #: The chunk being appended (lines, its mark): a broker whose connection broke
        #: may or may not have applied it (see :meth:`resync`).
        self._unsure: tuple[int, ReadMark] | None = None

    @property
    def done(self) -> bool:
        """Everything there is to read was appended (for now, following input)."""
        return not self.pending

    def look_again(self) -> None:
        """Following input, once all of it was appended: look for lines appended since
        (at most every half second), after checking each file (ConfigError)."""
        if self.follow and not self.pending and time.monotonic() >= self._next_look:
            for i in self.inputs:
                i.check(follow=True)
            self.pending = [(i, i.chunks(self.chunk_lines, True)) for i in self.inputs]
            self._next_look = time.monotonic() + 0.5

    def step(self) -> bool:
        """Append the next chunk of each input that has one; True if any had one."""
        ingested = False
        for inp, chunks in list(self.pending):
            if self._ahead(inp):
                continue  # (its next queue is full: the workers catch up first)
            item = next(chunks, None)
            if item is None:
                self.pending.remove((inp, chunks))
                self._record_input_end(inp)
                continue
            self._append(inp, *item)
            ingested = True
        return ingested

    def resync(self) -> None:
        """Go on from what the broker holds of each input, as a new run would: after its
        connection broke, the last append may or may not have been applied."""
        unsure, self._unsure = self._unsure, None
        self._ahead_of.clear()  # (read the ends again)
        self._trimmed_at.clear()
        for inp in self.inputs:
            mark = last_mark(self.broker, inp.topic, inp.id)
            if mark is None or mark == inp.mark:
                continue
            if unsure is not None and mark == unsure[1]:
                inp.lines += unsure[0]  # (it was applied)
            inp.mark, inp.position = mark, mark.position
        self.pending = [(i, i.chunks(self.chunk_lines, self.follow)) for i in self.inputs]

    def _append(self, inp: Input, lines: list[bytes], read: ReadMark) -> None:
        from rstreams.runtime.engine.operators.record import wall_clock_ms

        n = len(lines)
        # Columns, not a tuple per line: the lines are the value column as they are.
        mark = ((INGEST_HEADER, read.encode()),)
        headers: list[tuple[tuple[str, bytes], ...]]
        if inp.base is None:
            headers = [()] * n
            headers[-1] = mark
        else:
            headers = line_headers(inp.base, inp.position, lines, mark)
        # Chunks go round-robin over the queues, so the newest mark is the largest one
        # among the queues' last records (what resume looks for).
        q = self._rr % inp.queues
        self._rr += 1
        self._unsure = (n, read)  # (until the broker acknowledged it)
        first = self.broker.append_columns(
            inp.topic, q, [wall_clock_ms()] * n, [None] * n, lines, headers
        )
        if self.max_ahead is not None:
            start = self._ahead_of.get((inp.topic, q), (0, 0))[1]
            self._ahead_of[(inp.topic, q)] = (first + n, start)
        self.broker.flush()
        self._unsure = None
        inp.mark = read
        inp.position = read.position
        inp.lines += n
        if self.max_rate:
            time.sleep(n / self.max_rate)

    def _ahead(self, inp: Input) -> bool:
        """Whether the queue ``inp``'s next chunk goes to must wait: it holds
        :attr:`max_ahead` records or more and the job's group has not committed that many
        (a queue the group caught up with always takes a chunk). A queue that holds that
        many is first trimmed up to what every reader committed (:func:`trim_source`),
        so it holds at most ``max_ahead`` + a chunk. The broker is asked only then."""
        if self.max_ahead is None:
            return False
        from rstreams.runtime.engine.tasks.trim import trim_source

        key = (inp.topic, self._rr % inp.queues)
        if key not in self._ahead_of:
            self._ahead_of[key] = (self.broker.end_offset(*key), self.broker.start_offset(*key))
        end, start = self._ahead_of[key]
        if end - start < self.max_ahead:
            return False
        committed = self.broker.committed(self.job_id, *key)
        if self._trimmed_at.get(key) != committed:  # (waiting: nothing new to trim)
            self._ahead_of[key] = (end, trim_source(self.broker, self.job_id, *key, committed, end))
            self._trimmed_at[key] = committed
        return end - committed >= self.max_ahead and end > committed

    def _record_input_end(self, inp: Input) -> None:
        record_input_end(self.broker, self.job_id, inp.topic, inp.queues, inp.ended_at)

    def counts(self) -> dict[str, int]:
        """Lines appended and bytes read in this run, and the inputs' total size (a
        followed file's now: its size at start would put progress past 100%)."""
        return {
            "records_in": sum(i.lines for i in self.inputs),
            "bytes_read": sum(i.position for i in self.inputs),
            "bytes_total": sum(i.current_size() if self.follow else i.size for i in self.inputs),
        }
