"""The caching layer: a write-back cache of Python objects in front of a byte store.

Operators read and write plain Python values; serialization happens once per key per
commit, not once per record. At commit, :meth:`CachedStore.flush` serializes the dirty
entries as two columns and hands them to the change-logging layer below, which logs
them and then writes them to the store (see :mod:`rstreams.state.changelogging`).
Nothing is written outside a commit: when the cache is full (:attr:`CachedStore.full`)
its owner commits, and the commit empties it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

from rstreams.errors import SerdeError
from rstreams.serde import MsgpackSerde, Serde
from rstreams.state.changelogging import ChangeLoggingStore
from rstreams.state.stores import StoreDamagedError

_MISSING = object()
#: The ints msgpack packs (any other int fails to).
_PACKED_INTS = range(-(2**63), 2**64)


class CachedStore:
    """A typed view of a change-logged byte store with a bounded write-back cache.

    ``max_entries`` bounds memory: once that many keys are cached the cache is
    :attr:`full` (time to commit), and the commit's :meth:`flush` empties it.

    >>> from rstreams.runtime.queues import MemoryBroker
    >>> from rstreams.serde import get_serde
    >>> from rstreams.state.stores import MemoryStore
    >>> broker = MemoryBroker(); broker.create_topic("counts-changelog", 1)
    >>> inner = MemoryStore("counts")
    >>> logged = ChangeLoggingStore(inner, "counts-changelog", 0, broker)
    >>> s = CachedStore(logged, get_serde("msgpack"), get_serde("msgpack"))
    >>> s.put("a", 1); s.get("a"), len(inner)
    (1, 0)
    >>> s.flush(timestamp=0); s.send(); s.write(); len(inner)
    (1, 0)
    1
    """

    def __init__(
        self,
        wrapped: ChangeLoggingStore,
        key_serde: Serde,
        value_serde: Serde,
        max_entries: int = 100_000,
    ) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        self.value_serde = value_serde
        self._kser = key_serde.serialize
        self._kde = key_serde.deserialize
        self._vser = value_serde.serialize
        self._kser_many = key_serde.serialize_many
        self._vser_many = value_serde.serialize_many
        self._vde = value_serde.deserialize
        self._max = max_entries
        self._cache: dict[Any, Any] = {}
        self._dirty: set[Any] = set()
        #: Keys put since the last flush that the store below does not hold (put_new):
        #: deleted before the next flush, they leave no trace (no changelog record).
        self._born: set[Any] = set()
        #: Keys the cache could not answer, read from the store below (metered above).
        self.misses = 0
        #: Changes flushed (values, and deletes among them), metered above.
        self.puts = 0
        self.deletes = 0
        # Changes prepared (see prepare) and not serialized yet: keys, values, timestamp.
        self._later_keys: list[Any] = []
        self._later_values: list[Any] = []
        self._later_ts = 0
        self._defers = type(key_serde) is MsgpackSerde and type(value_serde) is MsgpackSerde
        #: Says, in the words of the step that owns the store, what a change that can
        #: not be stored is: ``explain(key, value, error)``, None to say it in the
        #: store's own terms (its name and internal key).
        self.explain: Callable[[Any, Any, SerdeError], str | None] | None = None

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._cache.get(key, _MISSING)
        if v is _MISSING:
            self.misses += 1
            raw = self.wrapped.get(self._kser(key))
            v = None if raw is None else self._decode(raw, key)
            self._cache[key] = v
        return default if v is None else v

    def get_many(self, keys: list[Any]) -> list[Any]:
        """:meth:`get` of each key (None when absent); keys not cached are read from the
        store in one lookup."""
        values = list(map(self._cache.get, keys, repeat(_MISSING)))
        if _MISSING not in values:
            return values
        missing = [i for i, v in enumerate(values) if v is _MISSING]
        self.misses += len(missing)
        mkeys = [keys[i] for i in missing]
        raws = self.wrapped.get_many(self._kser_many(mkeys))
        for i, k, raw in zip(missing, mkeys, raws):
            v = None if raw is None else self._decode(raw, k)
            self._cache[k] = v
            values[i] = v
        return values

    def add(self, key: Any, p: Any) -> Any:
        """``put(key, p if get(key) is None else get(key) + p)`` in one call (a count's
        every record, in the test driver); returns the new value."""
        v = self._cache.get(key, _MISSING)
        if v is _MISSING:
            v = self.get(key)
        new = p if v is None else v + p
        self._cache[key] = new
        self._dirty.add(key)
        return new

    def put_many(self, keys: list[Any], values: list[Any]) -> None:
        """:meth:`put` of each key and value."""
        self._cache.update(zip(keys, values))
        self._dirty.update(keys)

    def _decode(self, raw: bytes, key: Any) -> Any:
        try:
            return self._vde(raw)
        except SerdeError as e:
            msg = f"store {self.name!r}: can not read the value of key {key!r}: {e}"
            path = self.path
            if path is not None:
                # Every value a store holds came through its changelog, where it was
                # checked: its local copy is damaged (a store error, not a record's).
                raise StoreDamagedError(msg, store=self.name, path=str(path)) from None
            raise SerdeError(msg) from None

    @property
    def path(self) -> Path | None:
        """The directory of the store's local copy (None: it has none, it is in memory)."""
        return self.wrapped.path

    def put(self, key: Any, value: Any) -> None:
        self._cache[key] = value
        self._dirty.add(key)

    def put_new(self, key: Any, value: Any) -> None:
        """:meth:`put` of a key the store does not hold (the caller knows: a join's
        record waiting for its answer, keyed by its offset), so that a delete before the
        next flush cancels it: a record answered within a commit costs no changelog
        record, neither its value nor a tombstone. (Replayed at least once after a
        crash, such a key may be in the store already: then it stays until the record
        is answered again, one more duplicate of those at-least-once allows.)"""
        self._cache[key] = value
        self._dirty.add(key)
        self._born.add(key)

    def delete(self, key: Any) -> None:
        if key in self._born:
            self._born.discard(key)
            self._dirty.discard(key)
            del self._cache[key]
            return
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
    def pending(self) -> int:
        """Changes flushed and not yet written to the store (their commit is to come)."""
        return self.wrapped.pending + len(self._later_keys)

    @property
    def full(self) -> bool:
        """More keys are cached than ``max_entries``: time to commit."""
        return len(self._cache) >= self._max

    # -- commit -------------------------------------------------------------------------

    def flush(self, timestamp: int, empty_full: bool = True) -> tuple[int, int]:
        """Serialize the changed entries (None value = delete), hand them to the
        change-logging layer (changelog records with ``timestamp``) and mark them clean;
        a full cache is emptied (unless not ``empty_full``: the changes are not written
        yet, and reads must still find them here). Returns (changes, deletes among them).

        A value that can not be serialized raises :class:`SerdeError` naming the store
        and the key, and nothing is handed down.
        """
        if self._later_keys:
            self._log_later()  # (they were flushed first)
        changes = deletes = 0
        if len(self._dirty) == 1:  # (a record's one change)
            (k,) = self._dirty
            v = self._cache[k]
            try:
                kb, vb = self._kser(k), None if v is None else self._vser(v)
            except SerdeError as e:
                raise self._unstorable(k, v, e) from None
            self.wrapped.log_changes([kb], [vb], timestamp)
            self._dirty.clear()
            self._born.clear()
            changes, deletes = 1, int(v is None)
        elif self._dirty:
            keys = list(self._dirty)
            values = [self._cache[k] for k in keys]
            kbs: list[bytes] | None
            vbs: list[bytes | None] | None
            deletes = values.count(None)
            try:
                kbs = self._kser_many(keys)
                vbs = None if deletes else self._vser_many(values)  # type: ignore[assignment]
            except Exception:
                kbs = vbs = None
            if kbs is None or vbs is None:  # deletes, or a value that can not be stored
                kbs, vbs = [], []
                kser, vser = self._kser, self._vser
                for k, v in zip(keys, values):
                    try:
                        kbs.append(kser(k))
                        vbs.append(None if v is None else vser(v))
                    except SerdeError as e:
                        raise self._unstorable(k, v, e) from None
            self.wrapped.log_changes(kbs, vbs, timestamp)
            self._dirty.clear()
            self._born.clear()
            changes = len(keys)
        if empty_full and self.full:
            self._cache.clear()
        self.puts += changes - deletes
        self.deletes += deletes
        return changes, deletes

    def prepare(self, timestamp: int) -> None:
        """``flush(timestamp, empty_full=False)``, for a commit prepared now and written
        later (the test driver's, after every pipe). A change that can not fail to
        serialize (an int value under an ASCII str or an int key, both msgpack: a
        count's) is kept as objects until the commit sends it: the same changelog
        records, serialized a commit at a time rather than a pipe at a time."""
        dirty = self._dirty
        if len(dirty) == 1 and self._defers:
            (k,) = dirty
            v = self._cache[k]
            if (
                type(v) is int
                and v in _PACKED_INTS
                and ((type(k) is str and k.isascii()) or (type(k) is int and k in _PACKED_INTS))
            ):
                self._later_keys.append(k)
                self._later_values.append(v)
                self._later_ts = timestamp
                dirty.clear()
                self.puts += 1
                return
        self.flush(timestamp, empty_full=False)

    def _log_later(self) -> None:
        """Hand the changes :meth:`prepare` kept to the change-logging layer."""
        keys, values = self._later_keys, self._later_values
        self._later_keys, self._later_values = [], []
        values_bytes: list[bytes | None] = list(self._vser_many(values))
        self.wrapped.log_changes(self._kser_many(keys), values_bytes, self._later_ts)

    def _unstorable(self, key: Any, value: Any, e: SerdeError) -> SerdeError:
        if self.explain is not None and (said := self.explain(key, value, e)):
            return SerdeError(said)
        return SerdeError(f"store {self.name!r}: can not store key {key!r}: {e}")

    def send(self) -> None:
        """Append the flushed changes to the changelog (see the change-logging layer)."""
        if self._later_keys:
            self._log_later()
        self.wrapped.send()

    def write(self) -> None:
        """Write the flushed changes to the store with their changelog offset."""
        if self._later_keys:
            self._log_later()
        self.wrapped.write()

    # -- reading it all -----------------------------------------------------------------

    def _view(self) -> dict[Any, Any]:
        out = {self._kde(k): self._vde(v) for k, v in self.wrapped.items()}
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
        return len(self._view()) if self._dirty else len(self.wrapped)

    # -- restore and close --------------------------------------------------------------

    def restore(self, keys: Sequence[bytes], values: Sequence[bytes | None], offset: int) -> None:
        """Write changelog records read back into the store (before any processing: the
        cache is empty)."""
        self.wrapped.restore(keys, values, offset)

    def clear(self) -> None:
        self._cache.clear()
        self._dirty.clear()
        self._born.clear()
        self._later_keys, self._later_values = [], []
        self.wrapped.clear()

    def close(self) -> None:
        """Drop what is cached (committed changes are in the store) and close the store."""
        self._cache.clear()
        self._dirty.clear()
        self._born.clear()
        self._later_keys, self._later_values = [], []
        self.wrapped.close()
