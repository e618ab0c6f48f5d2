"""Durable, file-backed log broker: the embedded runtime's topics on local disk.

:class:`FileBroker` implements :class:`~rstreams.runtime.queues.broker.Broker` (topics of N
queues, dense per-queue offsets, consumer-group offsets) and keeps everything in files
under one root directory, so a job survives restarts and several worker processes
can share the log.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as root, FileBroker(root) as b:
...     b.create_topic("t", 2)
...     b.append("t", 1, [(0, b"k", b"v", ()), (1, None, None, (("h", b"x"),))])
...     [(r.offset, r.key, r.value, r.headers) for r in b.read("t", 1, 0)]
...     b.commit("g", "t", 1, 2)
...     b.committed("g", "t", 1), b.group_offsets("g")
0
[(0, b'k', b'v', ()), (1, None, None, (('h', b'x'),))]
(2, {('t', 1): 2})

Layout under ``root``::

    topics/<topic>/meta.json                 {"name", "queues", "compacted", retention...}
    topics/<topic>/<queue>/<base:020d>.log   segments: record-batch frames
    topics/<topic>/<queue>/<base:020d>.index sparse index (offset -> position), rebuildable
    topics/<topic>/<queue>/start-offset      logical start offset after purge ("N crc32")
    topics/<topic>/<queue>/durable-point     how far the queue is known whole and synced
    topics/<topic>/<queue>/lock, maint.lock  flock files (appends; purge/retention/compaction)
    groups/<group>/<topic>/<queue>.json      {"group", "topic", "queue", "offset", "crc"}
                                             (see rstreams.runtime.queues.offsets)

Topic and group names that are not plain ``[A-Za-z0-9_.-]`` (or start with a dot) are
percent-encoded in paths; the files hold the real names. The frame and index formats are
documented in :mod:`rstreams.runtime.queues._logformat`: one ``append`` call is one frame
with a crc32 over its header and payload.

Durability (``fsync``):

``"commit"`` (default)
    Data is fsync-ed by :meth:`FileBroker.flush` and by :meth:`FileBroker.commit` *before*
    the offset is recorded, and a segment is fsync-ed when it is rolled. Nothing appended
    before the last ``flush``/``commit`` that returned is lost by a crash of the process
    or of the machine, and a recorded offset never points past durable data. A flush
    syncs its queues at once (a few threads), and :meth:`FileBroker.commit_many` the
    offset files of a whole commit: concurrent fsyncs share the file system's journal
    commit, and each call still returns only once all of them are done.
``"always"``
    Every ``append`` is fsync-ed before it returns: nothing that was appended is lost.
``"never"``
    No fsync: a *process* crash loses nothing (appends go straight to the OS with
    ``pwrite``), a machine crash may lose recent appends and offsets.

In every mode committed offsets are written to a temporary file and renamed into place, so
a crash never leaves a half-written offset; and on the first access to a queue its last
segment is checked from the last index entry on: a torn or corrupt final frame (short
write, bad crc, garbage) is truncated away with a WARNING. A damaged frame followed by valid
frames is never skipped: reading it raises :class:`CorruptLogError` naming the topic,
queue, segment file and byte position.

Concurrency: any number of threads and processes may append to and read the same queue.
Appends are serialized per queue by ``flock`` on the queue's ``lock`` file; a writer first
catches up with frames and segments other processes wrote, so offsets stay dense and
unique. Readers take no lock: they see frames only up to the last whole, crc-valid one, so a
frame still being written is simply not visible yet. Purge, retention and compaction
serialize on ``maint.lock`` and only delete or atomically replace *closed* segments;
readers keep reading files they have open and pick up the new files when the queue
directory changes. Each committed offset is its own file, so processes committing
different queues of one group never overwrite each other.

Code: :mod:`.broker` (:class:`FileBroker`, the coordinator) over :mod:`.topic`
(``meta.json``), :mod:`.queue` (one queue's state and its recovery), :mod:`.segment`
(one segment file), :mod:`.reader` (reads and the read cache), :mod:`.retention` (purge
and retention), :mod:`.cleaner` (compaction) and :mod:`.marks` (the durable-point and
start-offset files); group offsets are :mod:`rstreams.runtime.queues.offsets`.

Limits: a queue in use holds 2 file descriptors (active segment, lock file) plus up to 4
of closed segments being read, so thousands of queues need a raised ``ulimit -n``.
Compaction keeps a dict of every distinct key of the queue in memory. A purge by another
process shows here at the next refresh (end of the known log, ``start_offset``,
``end_offset``); until then files this broker has open still serve their records.
"""

from __future__ import annotations

from pathlib import Path

# (names imported from this module when it was one file are kept importable from here)
from rstreams.runtime.queues._files import CorruptLogError, _encode_name
from rstreams.runtime.queues._files import FileLock as _FileLock
from rstreams.runtime.queues._files import _atomic_write as _atomic_write
from rstreams.runtime.queues.filelog.broker import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_TOMBSTONE_RETENTION_MS,
    FSYNC_POLICIES,
    FileBroker,
)
from rstreams.runtime.queues.filelog.marks import (
    DURABLE_FILE,
    below_durable,
    format_durable,
    format_start,
    parse_durable,
    parse_start,
)
from rstreams.runtime.queues.filelog.segment import SEGMENT_NAME as _SEGMENT_NAME  # noqa: F401
from rstreams.runtime.queues.filelog.segment import _fdatasync as _fdatasync

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "DEFAULT_TOMBSTONE_RETENTION_MS",
    "DURABLE_FILE",
    "FSYNC_POLICIES",
    "CorruptLogError",
    "FileBroker",
    "_FileLock",
    "below_durable",
    "format_durable",
    "format_start",
    "has_group",
    "has_topic",
    "parse_durable",
    "parse_start",
]


def has_topic(root: str | Path, name: str) -> bool:
    """Whether the log at ``root`` has the topic ``name``, looked up without opening
    the log (which would create its directories)."""
    return (Path(root) / "topics" / _encode_name(name) / "meta.json").exists()


def has_group(root: str | Path, group: str) -> bool:
    """Whether ``group`` committed offsets in the log at ``root`` (without opening it)."""
    return (Path(root) / "groups" / _encode_name(group)).is_dir()
