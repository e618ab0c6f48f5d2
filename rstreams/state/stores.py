"""Byte-level key-value stores. One instance per stateful operator per queue."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from rstreams.errors import StateStoreError


class StoreDamagedError(StateStoreError):
    """A store's local copy is damaged (checksum mismatch, missing or damaged SST, bad
    manifest, a stored value that does not decode): delete it (``path``) and rebuild it
    from the changelog. Other :class:`StateStoreError` s (the database is locked, the
    disk is full or read-only) are not cured by a rebuild."""


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
    """Interface of byte stores: point reads/writes, batched writes, ordered iteration."""

    name: str

    def get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """:meth:`get` of each key (stores override it with one lookup for all)."""
        return [self.get(k) for k in keys]

    def put(self, key: bytes, value: bytes) -> None:
        raise NotImplementedError

    def delete(self, key: bytes) -> None:
        raise NotImplementedError

    def write_batch(self, items: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Apply puts (and deletes, value None) as one unit."""
        for k, v in items:
            if v is None:
                self.delete(k)
            else:
                self.put(k, v)

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

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class MemoryStore(KeyValueStore):
    """A dict; sorted only when iterated.

    >>> s = MemoryStore("s")
    >>> s.write_batch([(b"b", b"2"), (b"a", b"1"), (b"c", None)])
    >>> list(s.items())
    [(b'a', b'1'), (b'b', b'2')]
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
