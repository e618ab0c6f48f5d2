"""RocksDB key-value store (through rocksdict, in raw-bytes mode: nothing is pickled).

One RocksDB database per store per queue, in ``<state-dir>/<store>/<queue>/``. Data
lives in the default column family, keys as they are; the store's bookkeeping (the
changelog offset the data corresponds to) lives in the ``meta`` column family and is
written **in the same WriteBatch** as the data it describes: a crash can never
separate them.

    >>> import tempfile
    >>> s = RocksDBStore(tempfile.mkdtemp(), "counts")
    >>> s.write_batch([(b"a", b"1"), (b"b", b"2")], meta={"changelog_offset": 2})
    >>> s.get(b"a"), list(s.items()), s.meta("changelog_offset")
    (b'1', [(b'a', b'1'), (b'b', b'2')], 2)
    >>> s.close()
"""

from __future__ import annotations

import json
import shutil
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from rstreams.state.stores import KeyValueStore

_META = "meta"  # the column family of the store's bookkeeping


@attrs.frozen
class RocksDBConfig:
    """Memory knobs, defaults sized for a small machine running several stores.

    ``block_cache_bytes`` is shared by all the stores of a process;
    ``write_buffer_bytes`` is per store (RocksDB keeps up to two per store).
    """

    block_cache_bytes: int = 32 * 1024 * 1024
    write_buffer_bytes: int = 2 * 1024 * 1024
    max_write_buffers: int = 2
    #: RocksDB's own write-ahead log. Off by default, as in Kafka Streams: the changelog
    #: is the durable record of state. Without it a crash loses the writes RocksDB had
    #: not flushed yet, data and recorded changelog offset alike (column families flush
    #: atomically), and restore replays the changelog from the offset that survived.
    wal: bool = False
    #: fsync the WAL on every batch (only with ``wal``).
    sync: bool = False


_shared_cache: dict[int, Any] = {}


def _options(config: RocksDBConfig) -> Any:
    from rocksdict import BlockBasedOptions, Cache, Options

    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    cache = _shared_cache.get(config.block_cache_bytes)
    if cache is None:
        cache = _shared_cache[config.block_cache_bytes] = Cache(config.block_cache_bytes)
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_size(config.write_buffer_bytes)
    opts.set_max_write_buffer_number(config.max_write_buffers)
    opts.set_keep_log_file_num(2)
    return opts


class RocksDBStore(KeyValueStore):
    """A byte store in its own RocksDB database."""

    def __init__(self, path: str | Path, name: str, config: RocksDBConfig | None = None) -> None:
        from rocksdict import Options, Rdict, WriteOptions

        self.name = name
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config = config or RocksDBConfig()
        opts = _options(self.config)
        opts.create_missing_column_families(True)
        opts.set_atomic_flush(True)  # data and its changelog offset reach disk together
        self._db = Rdict(str(self.path), opts, column_families={_META: Options(raw_mode=True)})
        self._meta = self._db.get_column_family(_META)
        self._meta_cf = self._db.get_column_family_handle(_META)
        self._write_opts = WriteOptions()
        # A property at runtime; the package stubs call it a method.
        self._write_opts.disable_wal = not self.config.wal  # type: ignore[assignment,method-assign]
        self._write_opts.sync = self.config.sync and self.config.wal
        self._count: int | None = None

    # -- data ----------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        v = self._db.get(key)
        return None if v is None else bytes(v)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        found = self._db.get(list(keys))  # one multi-get
        assert found is not None
        return [None if v is None else bytes(v) for v in found]

    def put(self, key: bytes, value: bytes) -> None:
        self.write_batch([(key, value)])

    def delete(self, key: bytes) -> None:
        self.write_batch([(key, None)])

    def write_batch(
        self,
        items: Sequence[tuple[bytes, bytes | None]],
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Apply puts/deletes (value None) and metadata updates atomically."""
        if items:
            keys, values = zip(*items)
        else:
            keys = values = ()
        self.write_columns(keys, values, meta)

    def write_columns(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        meta: dict[str, Any] | None = None,
    ) -> None:
        """:meth:`write_batch` of ``zip(keys, values)``, with no Python loop per key
        when nothing is deleted (a restore, a commit of counts)."""
        from rocksdict import WriteBatch

        wb = WriteBatch(raw_mode=True)
        if None in values:
            for k, v in zip(keys, values):
                if v is None:
                    wb.delete(k)
                else:
                    wb.put(k, v)
        else:
            deque(map(wb.put, keys, values), maxlen=0)
        for mk, mv in (meta or {}).items():
            wb.put(mk.encode(), json.dumps(mv).encode(), self._meta_cf)
        self._db.write(wb, self._write_opts)
        self._count = None

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range()

    def range(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        if start is None:
            it.seek_to_first()
        else:
            it.seek(start)
        while it.valid():
            k = it.key()
            if end is not None and k >= end:
                break
            yield bytes(k), bytes(it.value())
            it.next()

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self.range())
        return self._count

    # -- metadata ------------------------------------------------------------------------

    def meta(self, key: str, default: Any = None) -> Any:
        raw = self._meta.get(key.encode())
        return default if raw is None else json.loads(bytes(raw))

    def clear(self) -> None:
        """Delete everything (data and metadata)."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
        self.__init__(self.path, self.name, self.config)  # type: ignore[misc]

    def flush(self) -> None:
        self._db.flush()

    def close(self) -> None:
        if not self.config.wal:
            self._db.flush()  # what the memtables hold exists nowhere else on disk
        self._meta.close()
        self._db.close()
        # The column family handle keeps the database, and its LOCK, alive: drop it so
        # the store can be opened again in this process (a task given up and taken back).
        del self._meta_cf
