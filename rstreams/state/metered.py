"""The metered layer, top of every store stack, and the stack itself.

A task's store is four layers, as Kafka Streams stacks them::

    MeteredStore          counts, a batch at a time (StoreMetrics)
      CachedStore         Python objects, write-back cache, serialization at commit
        ChangeLoggingStore  a commit's changes: to the changelog, then to the store
          RocksDBStore or MemoryStore   bytes, written with their changelog offset

Processors read and write through the top; the task commits through it
(:meth:`MeteredStore.flush`, :meth:`~MeteredStore.send`, :meth:`~MeteredStore.write`)
and restores through it (:meth:`~MeteredStore.restore`). Counting adds no call per
record: the per-record methods *are* the cache's (bound once), and the counts are taken
where batches pass: the changes of each commit, the records of each restored chunk, the
keys the cache had to read from the store.

    >>> from rstreams.runtime.queues import MemoryBroker
    >>> from rstreams.serde import get_serde
    >>> from rstreams.state.stores import MemoryStore
    >>> broker = MemoryBroker(); broker.create_topic("n-changelog", 1)
    >>> msgpack = get_serde("msgpack")
    >>> s = store_stack(MemoryStore("n-store"), msgpack, msgpack, "n-changelog", 0, broker)
    >>> s.put("a", 1); s.put("b", 2); s.delete("b")
    >>> s.flush(timestamp=0); s.send(); s.write()
    2
    >>> dict(s.items()), s.changelog_offset, broker.end_offset("n-changelog", 0)
    ({'a': 1}, 2, 2)
    >>> m = s.metrics(); (m.puts, m.deletes, m.entries)
    (1, 1, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from rstreams.errors import SerdeError
from rstreams.serde import Serde
from rstreams.state.cache import CachedStore
from rstreams.state.changelogging import ChangeLoggingStore, ChangelogLog
from rstreams.state.stores import KeyValueStore


@attrs.frozen
class StoreMetrics:
    """What a store did since it was opened (counts), and its size now.

    ``puts`` and ``deletes`` count the entries commits wrote (a key written many times
    between two commits counts once: the cache coalesced it); ``gets`` the keys read
    from the store itself (the cache did not hold them); ``restored`` the changelog
    records replayed into it. ``entries`` and ``bytes`` are the store's own estimates
    (RocksDB's; ``bytes`` is None for a memory store).
    """

    puts: int
    deletes: int
    gets: int
    restored: int
    entries: int
    bytes: int | None


class MeteredStore:
    """The top of a store stack: what processors and the task hold (see the module)."""

    get: Callable[..., Any]
    get_many: Callable[[list[Any]], list[Any]]
    put: Callable[[Any, Any], None]
    put_new: Callable[[Any, Any], None]
    put_many: Callable[[list[Any], list[Any]], None]
    add: Callable[[Any, Any], Any]
    prepare: Callable[[int], None]
    delete: Callable[[Any], None]

    def __init__(self, wrapped: CachedStore) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        self.value_serde = wrapped.value_serde
        # The cache's own methods, not wrappers: no call is added per record.
        self.get = wrapped.get
        self.get_many = wrapped.get_many
        self.put = wrapped.put
        self.put_new = wrapped.put_new
        self.put_many = wrapped.put_many
        self.add = wrapped.add
        self.delete = wrapped.delete
        #: :meth:`flush` for a commit prepared now and written later (see
        #: ``Task.prepare_commit``): the cache's own, which counts the changes.
        self.prepare = wrapped.prepare
        self.restored = 0

    def explain_unstorable(self, explain: Callable[[Any, Any, SerdeError], str | None]) -> None:
        """Have ``explain(key, value, error)`` say what a change that can not be stored
        is, in the words of the step that owns the store (None: the store's own)."""
        self.wrapped.explain = explain

    @property
    def inner(self) -> KeyValueStore:
        """The byte store the layers wrap (the one that holds the data)."""
        return self.wrapped.wrapped.wrapped

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Current entries, uncommitted changes included (nothing is written)."""
        return self.wrapped.items()

    def __len__(self) -> int:
        return len(self.wrapped)

    @property
    def held(self) -> int:
        """Entries in memory (the process's cache budget counts them)."""
        return self.wrapped.held

    @property
    def pending(self) -> int:
        """Changes flushed and not yet written: the next commit sends and writes them."""
        return self.wrapped.pending

    @property
    def full(self) -> bool:
        """The cache is full: its owner should commit."""
        return self.wrapped.full

    def drop_clean(self) -> None:
        """Forget cached entries that are already in the store (memory pressure)."""
        self.wrapped.drop_clean()

    # -- commit: flush, send, write ---------------------------------------------------------

    def flush(self, timestamp: int, empty_full: bool = True) -> int:
        """First step of a commit: serialize what changed since the last one and take
        it as changelog records with ``timestamp``; nothing is written. Returns the
        number of changes. Raises SerdeError (naming the store and key) for a value
        that can not be stored. A full cache is emptied, unless not ``empty_full`` (a
        commit prepared now and written later: see ``Task.prepare_commit``)."""
        return self.wrapped.flush(timestamp, empty_full)[0]  # (the cache counts them)

    def send(self) -> None:
        """Append the flushed changes to the changelog (the broker, or the transaction
        being built)."""
        self.wrapped.send()

    def write(self) -> None:
        """Last step of a commit: write the changes to the store, in one batch with the
        changelog offset they bring it to."""
        self.wrapped.write()

    # -- restore --------------------------------------------------------------------------

    @property
    def changelog_offset(self) -> int | None:
        """The changelog offset the store's data corresponds to (None: none recorded)."""
        return self.inner.changelog_offset

    @property
    def path(self) -> Path | None:
        return self.inner.path

    def restore(self, keys: Sequence[bytes], values: Sequence[bytes | None], offset: int) -> None:
        """Write changelog records ``keys``/``values`` read back, up to ``offset``."""
        self.restored += len(keys)
        self.wrapped.restore(keys, values, offset)

    def clear(self) -> None:
        """Delete every entry and the checkpoint (a restore from the changelog's start)."""
        self.wrapped.clear()

    # -- the rest -------------------------------------------------------------------------

    def metrics(self) -> StoreMetrics:
        """The counts and the size estimates (cheap: no scan)."""
        entries, size = self.inner.estimate()
        return StoreMetrics(
            puts=self.wrapped.puts,
            deletes=self.wrapped.deletes,
            gets=self.wrapped.misses,
            restored=self.restored,
            entries=entries,
            bytes=size,
        )

    def close(self, flush: bool = False) -> None:
        """Close every layer. Changes not committed are dropped: a store is written only
        by a commit (``flush=True`` is refused for that reason)."""
        if flush:
            raise ValueError(
                f"store {self.name!r}: a store is written only by its task's commit; "
                "commit before closing"
            )
        self.wrapped.close()


def store_stack(
    store: KeyValueStore,
    key_serde: Serde,
    value_serde: Serde,
    changelog: str,
    queue: int,
    log: ChangelogLog,
    max_entries: int = 100_000,
) -> MeteredStore:
    """``store`` with its layers: metered, caching (``max_entries`` cached keys before
    it asks for a commit), change-logging to ``changelog[queue]`` through ``log``."""
    logged = ChangeLoggingStore(store, changelog, queue, log)
    return MeteredStore(CachedStore(logged, key_serde, value_serde, max_entries))
