"""Write-back cache of Python objects in front of a byte store.

Operators read and write plain Python values; serialization happens once per key per
flush (at commit), not once per record. A flush writes the dirty entries to the store
in one batch and hands the same batch to the changelog writer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from typing import Any

from rstreams.errors import SerdeError
from rstreams.serde import Serde
from rstreams.state.stores import KeyValueStore, StoreDamagedError

_MISSING = object()

ChangelogWriter = Callable[[Sequence[tuple[bytes, bytes | None]]], None]


class CachedStore:
    """A typed view of a byte store with a bounded write-back cache.

    ``max_entries`` bounds memory: when more keys than that are cached, the cache is
    flushed and cleared.

    >>> from rstreams.state.stores import MemoryStore
    >>> from rstreams.serde import get_serde
    >>> inner = MemoryStore("counts")
    >>> s = CachedStore(inner, get_serde("msgpack"), get_serde("msgpack"))
    >>> s.put("a", 1); s.get("a"), len(inner)
    (1, 0)
    >>> s.flush(); len(inner)
    1
    """

    def __init__(
        self,
        inner: KeyValueStore,
        key_serde: Serde,
        value_serde: Serde,
        changelog: ChangelogWriter | None = None,
        max_entries: int = 100_000,
        auto_flush: bool = True,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.value_serde = value_serde
        self._kser = key_serde.serialize
        self._kde = key_serde.deserialize
        self._vser = value_serde.serialize
        self._kser_many = key_serde.serialize_many
        self._vser_many = value_serde.serialize_many
        self._vde = value_serde.deserialize
        self._changelog = changelog
        self._max = max_entries
        self._cache: dict[Any, Any] = {}
        self._dirty: set[Any] = set()
        # Without auto_flush the owner (a task) commits when the cache is full: writing
        # state outside a commit would break exactly-once.
        self._auto_flush = auto_flush

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._cache.get(key, _MISSING)
        if v is _MISSING:
            raw = self.inner.get(self._kser(key))
            v = None if raw is None else self._decode(raw, key)
            if len(self._cache) >= self._max and self._auto_flush:
                self.flush(evict=True)
            self._cache[key] = v
        return default if v is None else v

    def get_many(self, keys: list[Any]) -> list[Any]:
        """:meth:`get` of each key (None when absent); keys not cached are read from the
        store in one lookup."""
        values = list(map(self._cache.get, keys, repeat(_MISSING)))
        if _MISSING not in values:
            return values
        missing = [i for i, v in enumerate(values) if v is _MISSING]
        if self._auto_flush and len(self._cache) + len(missing) > self._max:
            get = self.get  # may evict: one at a time
            return [get(k) if v is _MISSING else v for k, v in zip(keys, values)]
        mkeys = [keys[i] for i in missing]
        raws = self.inner.get_many(self._kser_many(mkeys))
        for i, k, raw in zip(missing, mkeys, raws):
            v = None if raw is None else self._decode(raw, k)
            self._cache[k] = v
            values[i] = v
        return values

    def put_many(self, keys: list[Any], values: list[Any]) -> None:
        """:meth:`put` of each key and value."""
        if self._auto_flush and len(self._cache) + len(keys) > self._max:
            for k, v in zip(keys, values):
                self.put(k, v)
            return
        self._cache.update(zip(keys, values))
        self._dirty.update(keys)

    def _decode(self, raw: bytes, key: Any) -> Any:
        try:
            return self._vde(raw)
        except SerdeError as e:
            msg = f"store {self.name!r}: can not read the value of key {key!r}: {e}"
            path = getattr(self.inner, "path", None)
            if path is not None:
                # Every value a store holds came through its changelog, where it was
                # checked: its local copy is damaged (a store error, not a record's).
                raise StoreDamagedError(msg, store=self.name, path=str(path)) from None
            raise SerdeError(msg) from None

    def put(self, key: Any, value: Any) -> None:
        if key not in self._cache and len(self._cache) >= self._max and self._auto_flush:
            self.flush(evict=True)
        self._cache[key] = value
        self._dirty.add(key)

    def delete(self, key: Any) -> None:
        self.put(key, None)

    @property
    def held(self) -> int:
        """Entries in memory (the process's cache budget counts them)."""
        return len(self._cache)

    def drop_clean(self) -> None:
        """Forget cached entries that are already in the store (memory pressure)."""
        if len(self._dirty) < len(self._cache):
            cache = self._cache
            self._cache = {k: cache[k] for k in self._dirty}

    @property
    def full(self) -> bool:
        """More keys are cached than ``max_entries``: time to commit."""
        return len(self._cache) >= self._max

    def take_dirty(self) -> list[tuple[bytes, bytes | None]]:
        """Serialize the changed entries (None value = delete) and mark them clean.

        The caller writes them (store, changelog) as part of its commit. A full cache
        drops its clean entries afterwards.
        """
        batch: list[tuple[bytes, bytes | None]] = []
        if self._dirty:
            keys = list(self._dirty)
            values = [self._cache[k] for k in keys]
            kbs: list[bytes] | None
            vbs: list[bytes] | None
            try:
                kbs = self._kser_many(keys)
                vbs = self._vser_many(values) if None not in values else None
            except Exception:
                kbs = vbs = None
            if kbs is not None and vbs is not None:
                batch = list(zip(kbs, vbs))
            else:  # deletes, or a value that can not be stored: one by one
                kser, vser = self._kser, self._vser
                for k, v in zip(keys, values):
                    try:
                        batch.append((kser(k), None if v is None else vser(v)))
                    except SerdeError as e:
                        raise SerdeError(
                            f"store {self.name!r}: can not store key {k!r}: {e}"
                        ) from None
            self._dirty.clear()
        if self.full:
            self._cache.clear()
        return batch

    def flush(self, evict: bool = False) -> None:
        """Write dirty entries to the store (and the changelog) as one batch."""
        batch = self.take_dirty()
        if batch:
            self.inner.write_batch(batch)
            if self._changelog is not None:
                self._changelog(batch)
        if evict:
            self._cache.clear()

    def _view(self) -> dict[Any, Any]:
        out = {self._kde(k): self._vde(v) for k, v in self.inner.items()}
        for k in self._dirty:  # changes not written yet win
            v = self._cache[k]
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Current entries, uncommitted changes included (nothing is written)."""
        return iter(self._view().items())

    def __len__(self) -> int:
        return len(self._view()) if self._dirty else len(self.inner)

    def close(self, flush: bool = True) -> None:
        """Flush (unless told not to: a failed task drops what it did not commit)."""
        if flush:
            self.flush(evict=True)
        else:
            self._cache.clear()
            self._dirty.clear()
        self.inner.close()
