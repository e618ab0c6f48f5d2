"""The store contract (byte-level key-value stores) and the memory store. One store per
stateful operator per queue, at the bottom of its stack (see :mod:`rstreams.state.stack`)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from pathlib import Path

from rstreams.errors import StateStoreError

#: The key under which a windowed aggregation or a join keeps its task's stream time in
#: its store, beside the windows: the runtime's bookkeeping, not a user's entry.
STREAM_TIME_KEY = ("t",)


class StoreDamagedError(StateStoreError):
    """A store's local copy is damaged (checksum mismatch, missing or damaged SST, bad
    manifest, a stored value that does not decode): delete it (``path``) and rebuild it
    from the changelog. Other :class:`StateStoreError` s (the database is locked, the
    disk is full or read-only) are not cured by a rebuild."""


class StoreLockedError(StateStoreError):
    """A store's local copy is open elsewhere (its RocksDB LOCK is held): by a worker of
    this host that still runs the store's task, maybe after losing it to this one."""


class LostStateError(StateStoreError):
    """Records the job's state relies on can not be read or are gone from its log: a
    damaged changelog, a changelog ending below a store's checkpoint, a queue ending
    below what its last transaction wrote. Nothing else holds them: the job is rebuilt
    from its input (``rstreams run ... --fresh``). Names ``topic``, ``queue`` and the
    first ``offset`` missing."""

    def __init__(
        self,
        message: str,
        *,
        store: str | None = None,
        topic: str,
        queue: int,
        offset: int | None,
    ) -> None:
        super().__init__(message, store=store)
        self.topic = topic
        self.queue = queue
        self.offset = offset


class KeyValueStore:
    """The store contract: the byte store at the bottom of every store stack.

    Point reads and writes, ordered iteration, and a batched write that applies as one
    unit **with the changelog offset it brings the store to** (the store's checkpoint:
    :attr:`changelog_offset` reads it back, and a restore replays the changelog from
    there). :meth:`clear` empties the store, checkpoint included. A subclass implements
    get/put/delete/items/``__len__``; the rest has working defaults (RocksDB overrides
    them with one WriteBatch, one multi-get, one seek).

    The layers of :mod:`rstreams.state.stack` wrap such a store; processors never see
    it.
    """

    name: str
    #: What the store's checkpoint is, when the store keeps none of its own (a memory
    #: store lives as long as its task: it has nothing to resume from).
    _offset: int | None = None
    #: Files a durable store found but does not use (a crash, a damaged MANIFEST).
    dropped_files: Sequence[str] = ()
    #: The directory of a durable store's local copy (None: in memory).
    path: Path | None = None

    def get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """:meth:`get` of each key (stores override it with one lookup for all)."""
        return [self.get(k) for k in keys]

    def put(self, key: bytes, value: bytes) -> None:
        raise NotImplementedError

    def delete(self, key: bytes) -> None:
        raise NotImplementedError

    def write_batch(
        self, items: Sequence[tuple[bytes, bytes | None]], offset: int | None = None
    ) -> None:
        """Apply puts (and deletes, value None) as one unit; with ``offset``, record that
        the store now holds its changelog up to there (in the same unit)."""
        for k, v in items:
            if v is None:
                self.delete(k)
            else:
                self.put(k, v)
        if offset is not None:
            self._offset = offset

    def write_columns(
        self, keys: Sequence[bytes], values: Sequence[bytes | None], offset: int | None = None
    ) -> None:
        """:meth:`write_batch` of ``zip(keys, values)`` (a restore, a commit)."""
        self.write_batch(list(zip(keys, values)), offset)

    @property
    def changelog_offset(self) -> int | None:
        """The changelog offset the data corresponds to (None: none recorded)."""
        return self._offset

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """All entries in key order."""
        raise NotImplementedError

    def range(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with start <= key < end, in key order."""
        for k, v in self.items():
            if (start is None or k >= start) and (end is None or k < end):
                yield k, v

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for k, v in self.range(prefix):
            if not k.startswith(prefix):
                return
            yield k, v

    def __len__(self) -> int:
        raise NotImplementedError

    def estimate(self) -> tuple[int, int | None]:
        """(entries, bytes or None), cheaply: an estimate where counting would scan."""
        return len(self), None

    def clear(self) -> None:
        """Delete every entry and the checkpoint."""
        for k, _ in list(self.items()):
            self.delete(k)
        self._offset = None

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class MemoryStore(KeyValueStore):
    """A dict; sorted only when iterated.

    >>> s = MemoryStore("s")
    >>> s.write_batch([(b"b", b"2"), (b"a", b"1"), (b"c", None)], offset=3)
    >>> list(s.items()), s.changelog_offset
    ([(b'a', b'1'), (b'b', b'2')], 3)
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        self._data.pop(key, None)

    def write_batch(
        self, items: Sequence[tuple[bytes, bytes | None]], offset: int | None = None
    ) -> None:
        if items:
            keys, values = zip(*items)
            self.write_columns(keys, values, offset)
        elif offset is not None:
            self._offset = offset

    def write_columns(
        self, keys: Sequence[bytes], values: Sequence[bytes | None], offset: int | None = None
    ) -> None:
        data = self._data
        if None in values:
            for k, v in zip(keys, values):
                if v is None:
                    data.pop(k, None)
                else:
                    data[k] = v
        else:
            data.update(zip(keys, values))  # type: ignore[arg-type]  # no None in values
        if offset is not None:
            self._offset = offset

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for k in sorted(self._data):
            yield k, self._data[k]

    def range(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = sorted(self._data)
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        for k in keys[lo:hi]:
            yield k, self._data[k]

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()
        self._offset = None
