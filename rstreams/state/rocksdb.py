"""RocksDB key-value store (through rocksdict, in raw-bytes mode: nothing is pickled).

One RocksDB database per store per queue, in ``<state-dir>/<store>/<queue>/``. Data
keys are prefixed with ``d`` and metadata keys with ``m``, so the store's bookkeeping
(the last applied transaction, the changelog offset the data corresponds to) lives in
the same database and is written **in the same WriteBatch** as the data it describes:
a crash can never separate them.

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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from rstreams.state.stores import KeyValueStore

_DATA = b"d"
_META = b"m"
_DATA_END = b"e"  # first prefix after the data range


@attrs.frozen
class RocksDBConfig:
    """Memory knobs, defaults sized for a small machine running several stores.

    ``block_cache_bytes`` is shared by all the stores of a process;
    ``write_buffer_bytes`` is per store (RocksDB keeps up to two per store).
    """

    block_cache_bytes: int = 32 * 1024 * 1024
    write_buffer_bytes: int = 2 * 1024 * 1024
    max_write_buffers: int = 2
    #: fsync RocksDB's WAL on every batch. The changelog is the durable record of state,
    #: so by default the local store relies on the OS (a lost tail is replayed).
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
        from rocksdict import Rdict, WriteOptions

        self.name = name
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config = config or RocksDBConfig()
        self._db = Rdict(str(self.path), _options(self.config))
        self._write_opts = WriteOptions()
        self._write_opts.sync = self.config.sync
        self._count: int | None = None

    # -- data ----------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        v = self._db.get(_DATA + key)
        return None if v is None else bytes(v)

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
        from rocksdict import WriteBatch

        wb = WriteBatch(raw_mode=True)
        for k, v in items:
            if v is None:
                wb.delete(_DATA + k)
            else:
                wb.put(_DATA + k, v)
        for mk, mv in (meta or {}).items():
            wb.put(_META + mk.encode(), json.dumps(mv).encode())
        self._db.write(wb, self._write_opts)
        self._count = None

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range()

    def range(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        it.seek(_DATA + (start or b""))
        stop = _DATA_END if end is None else _DATA + end
        while it.valid():
            k = it.key()
            if k >= stop:
                break
            yield bytes(k[1:]), bytes(it.value())
            it.next()

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self.range())
        return self._count

    # -- metadata ------------------------------------------------------------------------

    def meta(self, key: str, default: Any = None) -> Any:
        raw = self._db.get(_META + key.encode())
        return default if raw is None else json.loads(bytes(raw))

    def clear(self) -> None:
        """Delete everything (data and metadata)."""
        self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)
        self.__init__(self.path, self.name, self.config)  # type: ignore[misc]

    def flush(self) -> None:
        self._db.flush()

    def close(self) -> None:
        self._db.close()
