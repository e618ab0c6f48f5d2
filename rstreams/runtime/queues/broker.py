"""The contract between the engine and a broker: :class:`Broker`.

:class:`~rstreams.runtime.queues.memory.MemoryBroker` and
:class:`~rstreams.runtime.queues.filelog.FileBroker` implement it; the engine, the
supervisor, subscriptions and the admin commands use nothing else of a broker.
``tests/unit/test_broker_contract.py`` checks both against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from rstreams.errors import ConfigError
from rstreams.runtime.queues.base import LogRecord, RecordColumns

#: One record to append: (timestamp ms, key, value, headers ((name, bytes), ...)).
Record = tuple[int, bytes | None, bytes | None, tuple]


def check_create_topic(name: str, queues: int, existing: int | None) -> bool:
    """Check :meth:`Broker.create_topic`'s queue count against the topic's ``existing``
    count (None: no such topic); whether the topic has to be created."""
    if existing is not None:
        if existing != queues:
            raise ConfigError(f"topic {name!r} exists with {existing} queues; asked for {queues}")
        return False
    if queues < 1:
        raise ConfigError(f"topic {name!r} needs at least one queue; got {queues}")
    return True


def check_retention(retention_ms: int | None, retention_bytes: int | None) -> None:
    """Refuse a retention option that is neither None nor an int >= 0."""
    for what, v in (("retention_ms", retention_ms), ("retention_bytes", retention_bytes)):
        if v is not None and (not isinstance(v, int) or v < 0):
            raise ConfigError(f"{what} must be None or an int >= 0; got {v!r}")


def unknown_topic(topic: str) -> ConfigError:
    """The error for a topic that does not exist."""
    return ConfigError(f"topic {topic!r} does not exist")


def unknown_queue(topic: str, queue: int, count: int) -> ConfigError:
    """The error for a queue number outside ``0 <= queue < count``."""
    return ConfigError(f"topic {topic!r} has no queue {queue} (it has {count})")


def purged(topic: str, queue: int, offset: int, start: int) -> ConfigError:
    """The error for a read below a queue's start offset."""
    return ConfigError(
        f"offset {offset} of {topic}[{queue}] was purged; the queue starts at {start}"
    )


def not_compacted(topic: str) -> ConfigError:
    """The error for compacting a topic not created with ``compacted=True``."""
    return ConfigError(f"topic {topic!r} is not compacted; create it with compacted=True")


class Broker(Protocol):
    """Topics of N queues with dense per-queue offsets, and consumer-group offsets.

    Offsets: every queue numbers its records 0, 1, 2, ... in append order, with no gaps
    and no reuse. ``start_offset <= end_offset``; the records between them are readable
    (on a compacted topic some of them may have been removed by :meth:`compact`).

    Errors: an unknown topic, a queue number outside ``0 <= queue < queue_count`` and a
    read below the start offset raise :class:`~rstreams.errors.ConfigError` (the same
    type and message on every broker), as do an empty topic or group name and a negative
    committed offset. Malformed records (not four fields, columns of different lengths,
    timestamps that are not ints) raise ``TypeError`` and append nothing.
    """

    # -- topics -------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        queues: int,
        *,
        compacted: bool = False,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        segment_bytes: int | None = None,
    ) -> None:
        """Create topic ``name`` with ``queues`` (>= 1) queues, all empty.

        Idempotent: a topic that exists with as many queues is left as it is (its
        records and options kept); with another count it is a ``ConfigError``.
        ``retention_*`` and ``segment_bytes`` are storage hints a broker without
        segments ignores.
        """
        ...

    def queue_count(self, name: str) -> int | None:
        """The number of queues of topic ``name``; None if it does not exist."""
        ...

    def topics(self) -> dict[str, int]:
        """Every topic and its queue count."""
        ...

    # -- append -------------------------------------------------------------------------

    def append(self, topic: str, queue: int, records: Iterable[Record]) -> int:
        """Append ``(timestamp, key, value, headers)`` records; the first new offset.

        They get the offsets ``end_offset, end_offset + 1, ...`` in order. Appending
        nothing returns the end offset and changes nothing.
        """
        ...

    def append_columns(
        self,
        topic: str,
        queue: int,
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[tuple],
    ) -> int:
        """:meth:`append` of records given as columns of one length; the first new offset."""
        ...

    def append_encoded(
        self, topic: str, queue: int, payload: bytes, count: int, max_ts: int
    ) -> int:
        """:meth:`append` of ``count`` records encoded by ``_logformat.encode_batch``
        (``max_ts`` their largest timestamp); the first new offset."""
        ...

    # -- read ---------------------------------------------------------------------------

    def read(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> list[LogRecord]:
        """Records with offsets >= ``offset``, oldest first, at most ``max_records``.

        ``[]`` at or after the end offset and when ``max_records <= 0``; every record
        when ``max_records`` is None. An ``offset`` below the start offset (purged) is a
        ``ConfigError``. Offsets are consecutive except where compaction removed records.
        """
        ...

    def read_columns(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> RecordColumns:
        """:meth:`read` as columns: the same records, in the same order."""
        ...

    def start_offset(self, topic: str, queue: int) -> int:
        """The first offset that may be read (0 until a purge or retention moves it)."""
        ...

    def end_offset(self, topic: str, queue: int) -> int:
        """The offset the next appended record gets (the number of records ever appended)."""
        ...

    def end_offsets(self, queues: Iterable[tuple[str, int]]) -> list[int]:
        """:meth:`end_offset` of every ``(topic, queue)``, in order, in one call (one
        round trip on a remote broker); errors as :meth:`end_offset`'s."""
        ...

    # -- removing records ---------------------------------------------------------------

    def purge(self, topic: str, queue: int, before: int) -> None:
        """Drop the records below offset ``before``: the start offset becomes
        ``max(start, min(before, end))``. Offsets are never reused."""
        ...

    def compact(self, topic: str, queue: int) -> int:
        """Remove records of a compacted topic superseded by a later one with the same
        key; returns how many were removed (0 is always allowed).

        The latest record of every key stays, keyless records stay, and the offsets of
        what stays do not change. A topic not created with ``compacted=True`` is a
        ``ConfigError``.
        """
        ...

    def enforce_retention(self) -> int:
        """Drop old records of topics created with ``retention_ms``/``retention_bytes``
        (only whole segments, from the start); the number of segments deleted."""
        ...

    # -- consumer groups ----------------------------------------------------------------

    def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        """Record ``offset`` (the next offset to process) as ``group``'s position in a queue.

        Everything this broker appended before is made durable first (as by
        :meth:`flush`), so a committed position never points past data a crash can lose.
        """
        ...

    def commit_many(self, commits: Sequence[tuple[str, str, int, int]]) -> None:
        """:meth:`commit` of each ``(group, topic, queue, offset)``, in order (a queue
        given twice ends at its last offset), in one step where the broker can (the file
        log syncs the files together; Redis makes one script call). Every commit is
        checked before any is recorded; an empty sequence does nothing (not even a flush).
        """
        ...

    def committed(self, group: str, topic: str, queue: int) -> int:
        """The offset ``group`` last committed for the queue; 0 if none."""
        ...

    def groups(self) -> list[str]:
        """Every group that committed an offset, sorted."""
        ...

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """``{(topic, queue): offset}`` of everything ``group`` committed (``{}`` if nothing)."""
        ...

    # -- lifetime -----------------------------------------------------------------------

    def flush(self) -> None:
        """Make everything appended so far durable (a no-op for a broker in memory)."""
        ...

    def close(self) -> None:
        """Flush and release resources. Idempotent, and :meth:`flush` may follow.

        A broker that keeps files refuses appends, reads and commits once closed
        (``ConfigError``); one in memory keeps working."""
        ...
