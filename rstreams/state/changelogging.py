"""The change-logging layer: every change a commit writes to a store goes to its
changelog first, and reaches the store with the changelog offset it brings it to.

A commit hands it a batch of changes (:meth:`ChangeLoggingStore.log_changes`, from the
cache's flush); :meth:`~ChangeLoggingStore.send` appends them, as changelog records, to
the :class:`ChangelogLog` it was given (the broker itself, or the transaction an
exactly-once commit is building); :meth:`~ChangeLoggingStore.write` then applies them to
the byte store in one batch together with the changelog's end offset, the store's
checkpoint. Data never reaches the store before the changelog records that hold it.

    >>> from rstreams.runtime.queues import MemoryBroker
    >>> from rstreams.state.stores import MemoryStore
    >>> broker = MemoryBroker(); broker.create_topic("c-changelog", 1)
    >>> s = ChangeLoggingStore(MemoryStore("c-store"), "c-changelog", 0, broker)
    >>> s.log_changes([b"a", b"b"], [b"1", None], timestamp=5)
    >>> s.send(); s.write()
    >>> [(r.key, r.value) for r in broker.read("c-changelog", 0, 0)]
    [(b'a', b'1'), (b'b', None)]
    >>> s.get(b"a"), s.changelog_offset
    (b'1', 2)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from rstreams.state.stores import KeyValueStore


class ChangelogLog(Protocol):
    """Where changelog records go: the broker (at-least-once) or a transaction being
    built (exactly-once), which reads end offsets from the broker."""

    def append_columns(
        self,
        topic: str,
        queue: int,
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[tuple],
    ) -> int: ...

    def end_offset(self, topic: str, queue: int) -> int: ...


class ChangeLoggingStore:
    """A byte store whose committed changes are logged to changelog ``topic[queue]``.

    Reads go to the store as they are; the changes of a commit wait here, between
    :meth:`log_changes` and :meth:`write` (no reader sees the store in between: a
    commit runs between two batches of processing).
    """

    def __init__(self, wrapped: KeyValueStore, topic: str, queue: int, log: ChangelogLog) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        self.topic = topic
        self.queue = queue
        self.log = log
        self._keys: list[bytes] = []
        self._values: list[bytes | None] = []
        self._timestamp = 0
        self._sent = 0  # changes already appended to the changelog

    # -- reads: the store's ---------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        return self.wrapped.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return self.wrapped.get_many(keys)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return self.wrapped.items()

    def range(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        return self.wrapped.range(start, end)

    def __len__(self) -> int:
        return len(self.wrapped)

    @property
    def changelog_offset(self) -> int | None:
        return self.wrapped.changelog_offset

    @property
    def path(self) -> Path | None:
        return self.wrapped.path

    # -- a commit's changes ---------------------------------------------------------------

    def log_changes(self, keys: list[bytes], values: list[bytes | None], timestamp: int) -> None:
        """Take a commit's changes (value None: delete); nothing is written yet."""
        if self._keys:
            self._keys += keys
            self._values += values
        else:
            self._keys, self._values = keys, values
        self._timestamp = timestamp

    @property
    def pending(self) -> int:
        """Changes taken and not yet written to the store."""
        return len(self._keys)

    def send(self) -> None:
        """Append the changes not sent yet to the changelog, as records with the
        commit's timestamp and no headers."""
        keys = self._keys[self._sent :] if self._sent else self._keys
        if keys:
            values = self._values[self._sent :] if self._sent else self._values
            n = len(keys)
            self.log.append_columns(
                self.topic, self.queue, [self._timestamp] * n, keys, values, [()] * n
            )
            self._sent = len(self._keys)

    def write(self) -> None:
        """Apply the changes sent to the store, in one batch with the changelog's end
        offset (they are its last records)."""
        if not self._keys:
            return
        keys, values = self._keys, self._values
        self._keys, self._values, self._sent = [], [], 0
        self.wrapped.write_columns(keys, values, self.log.end_offset(self.topic, self.queue))

    def restore(self, keys: Sequence[bytes], values: Sequence[bytes | None], offset: int) -> None:
        """Write changelog records read back (they are logged already) up to ``offset``."""
        self.wrapped.write_columns(keys, values, offset)

    def clear(self) -> None:
        self._keys, self._values, self._sent = [], [], 0
        self.wrapped.clear()

    def close(self) -> None:
        """Close the store; changes not written are dropped (their commit failed)."""
        self._keys, self._values, self._sent = [], [], 0
        self.wrapped.close()
