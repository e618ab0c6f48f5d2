"""RocksDB key-value store (through rocksdict, in raw-bytes mode: nothing is pickled).

One RocksDB database per store per queue, in ``<state-dir>/<store>/<queue>/``. Data
lives in the default column family, keys as they are; the store's bookkeeping (the
changelog offset the data corresponds to) lives in the ``meta`` column family and is
written **in the same WriteBatch** as the data it describes: a crash can never
separate them.

A RocksDB failure (rocksdict raises a plain ``Exception`` whose message starts with
``Corruption:``, ``IO error:``...) is raised as a
:class:`~rstreams.state.stores.StoreDamagedError` naming the store and its directory,
or, when deleting the local copy would not help (the database is locked, the disk is
full or read-only), as a plain :class:`~rstreams.errors.StateStoreError`. Checksums are
verified on every read and paranoid checks are on, so damaged files are found, not read.

    >>> import tempfile
    >>> s = RocksDBStore(tempfile.mkdtemp(), "counts")
    >>> s.write_batch([(b"a", b"1"), (b"b", b"2")], offset=2)
    >>> s.get(b"a"), list(s.items()), s.changelog_offset
    (b'1', [(b'a', b'1'), (b'b', b'2')], 2)
    >>> s.close()
"""

from __future__ import annotations

import json
import shutil
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs

from rstreams.errors import StateStoreError, too_many_open_files
from rstreams.runtime.faults import POINTS, maybe_fail
from rstreams.state.stores import KeyValueStore, StoreDamagedError, StoreLockedError

_META = "meta"  # the column family of the store's bookkeeping
_OFFSET = "changelog_offset"  # its key of the checkpoint (JSON, as every meta value)
_RANGE_CHUNK = 1024  # entries read per iterator: no iterator outlives a chunk
# RocksDB messages of failures a new local copy would meet again: the database is
# locked (by this process or another), the disk is full or read-only...
_LOCKED = ("lock hold", "While lock file", "/LOCK:")
_NOT_DAMAGE = ("no space left", "permission denied", "read-only file system",
               "too many open files")  # fmt: skip


def store_error(name: str, path: Path, what: str, e: BaseException) -> StateStoreError:
    """The :class:`StateStoreError` of RocksDB failure ``e`` of store ``name``."""
    msg = str(e)
    lower = msg.lower()
    # (a LOCK file that could not be opened for want of descriptors is not held)
    locked = any(w in msg for w in _LOCKED) and "too many open files" not in lower
    damage = not locked and not any(w in lower for w in _NOT_DAMAGE)
    cls = StoreDamagedError if damage else StoreLockedError if locked else StateStoreError
    if "too many open files" in lower:  # (the process's limit: what to do, first)
        msg = f"{too_many_open_files()}, then run the same command again ({msg})"
    return cls(
        f"state store {name!r} ({path}): RocksDB could not {what}: {msg}",
        store=name,
        path=str(path),
    )


def _is_rocksdb_error(e: BaseException) -> bool:
    # rocksdict raises plain Exception for every RocksDB status that is not OK.
    return type(e) is Exception


def _injected_failure(point: str, path: Path) -> None:
    """A fault test's write error, raised as rocksdict raises RocksDB's."""
    try:
        maybe_fail(point, path)
    except OSError as e:
        raise Exception(f"IO error: {e.strerror}: While appending to file: {path}") from None


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
    # Stop at damage found while opening, flushing or compacting instead of going on
    # with what is readable (reads verify block checksums by default).
    opts.set_paranoid_checks(True)
    return opts


class RocksDBStore(KeyValueStore):
    """A byte store in its own RocksDB database."""

    path: Path

    def __init__(self, path: str | Path, name: str, config: RocksDBConfig | None = None) -> None:
        from rocksdict import WriteOptions

        self.name = name
        self.path = Path(path)
        self.config = config or RocksDBConfig()
        self._write_opts = WriteOptions()
        # A property at runtime; the package stubs call it a method.
        self._write_opts.disable_wal = not self.config.wal  # type: ignore[assignment,method-assign]
        self._write_opts.sync = self.config.sync and self.config.wal
        self._count: int | None = None
        self._open()

    def _open(self) -> None:
        from rocksdict import Options, Rdict

        self.path.mkdir(parents=True, exist_ok=True)
        before = {f.name for f in self.path.glob("*.sst")}
        opts = _options(self.config)
        opts.create_missing_column_families(True)
        opts.set_atomic_flush(True)  # data and its changelog offset reach disk together
        try:
            self._db = Rdict(str(self.path), opts, column_families={_META: Options(raw_mode=True)})
        except Exception as e:
            if _is_rocksdb_error(e):
                raise store_error(self.name, self.path, "open the database", e) from None
            raise
        self._meta = self._db.get_column_family(_META)
        self._meta_cf = self._db.get_column_family_handle(_META)
        self._count = None
        #: SST files the directory held that the database does not use (RocksDB deletes
        #: them at open): left over by a crash, or lost by a damaged MANIFEST.
        self.dropped_files = sorted(before - {f["name"].lstrip("/") for f in self._live_files()})

    def _live_files(self) -> list[dict[str, Any]]:
        try:
            return list(self._db.live_files())
        except Exception as e:
            self._fail("list its files", e)

    def _fail(self, what: str, e: Exception) -> NoReturn:
        if _is_rocksdb_error(e):
            raise store_error(self.name, self.path, what, e) from None
        raise e

    # -- data ----------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        try:
            v = self._db.get(key)
        except Exception as e:
            self._fail("read", e)
        return None if v is None else bytes(v)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        try:
            found = self._db.get(list(keys))  # one multi-get
        except Exception as e:
            self._fail("read", e)
        assert found is not None
        return [None if v is None else bytes(v) for v in found]

    def put(self, key: bytes, value: bytes) -> None:
        self.write_batch([(key, value)])

    def delete(self, key: bytes) -> None:
        self.write_batch([(key, None)])

    def write_batch(
        self, items: Sequence[tuple[bytes, bytes | None]], offset: int | None = None
    ) -> None:
        """Apply puts/deletes (value None) and the changelog ``offset`` atomically."""
        if items:
            keys, values = zip(*items)
        else:
            keys = values = ()
        self.write_columns(keys, values, offset)

    def write_columns(
        self, keys: Sequence[bytes], values: Sequence[bytes | None], offset: int | None = None
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
        if offset is not None:
            wb.put(_OFFSET.encode(), json.dumps(offset).encode(), self._meta_cf)
        try:
            if POINTS:
                _injected_failure("store-write", self.path)
            self._db.write(wb, self._write_opts)
        except Exception as e:
            self._fail("write", e)
        self._count = None

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range()

    def range(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        # In chunks, each with its own iterator: a generator left unfinished holds no
        # iterator (which would keep the database, and its LOCK, alive after close).
        after: bytes | None = None
        while True:
            chunk = self._chunk(start, after, end)
            yield from chunk
            if len(chunk) < _RANGE_CHUNK:
                return
            after = chunk[-1][0]

    def _chunk(
        self, start: bytes | None, after: bytes | None, end: bytes | None
    ) -> list[tuple[bytes, bytes]]:
        """Up to _RANGE_CHUNK entries from ``start`` (or after ``after``) below ``end``."""
        out: list[tuple[bytes, bytes]] = []
        try:
            it = self._db.iter()
            if after is not None:
                it.seek(after)
                if it.valid() and it.key() == after:
                    it.next()
            elif start is None:
                it.seek_to_first()
            else:
                it.seek(start)
            while it.valid() and len(out) < _RANGE_CHUNK:
                k = it.key()
                if end is not None and k >= end:
                    return out
                out.append((bytes(k), bytes(it.value())))
                it.next()
            # An iterator stops (valid() False) at damage too: only status() tells.
            it.status()
        except Exception as e:
            self._fail("read", e)
        return out

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self.range())
        return self._count

    # -- metadata ------------------------------------------------------------------------

    def meta(self, key: str, default: Any = None) -> Any:
        try:
            raw = self._meta.get(key.encode())
        except Exception as e:
            self._fail("read its metadata", e)
        return default if raw is None else json.loads(bytes(raw))

    @property
    def changelog_offset(self) -> int | None:
        offset = self.meta(_OFFSET)
        return None if offset is None else int(offset)

    def estimate(self) -> tuple[int, int | None]:
        """RocksDB's own estimates (property reads, no scan): keys, and bytes in SST
        files and memtables."""
        try:
            prop = self._db.property_int_value
            entries = prop("rocksdb.estimate-num-keys") or 0
            size = (prop("rocksdb.total-sst-files-size") or 0) + (
                prop("rocksdb.cur-size-all-mem-tables") or 0
            )
        except Exception as e:
            self._fail("read its size estimates", e)
        return int(entries), int(size)

    def clear(self) -> None:
        """Delete everything (data and metadata): the database is closed, its directory
        deleted and a new, empty one opened in its place."""
        self._release()
        shutil.rmtree(self.path, ignore_errors=True)
        self._open()

    def flush(self) -> None:
        try:
            self._db.flush()
        except Exception as e:
            self._fail("flush", e)

    def close(self) -> None:
        if not hasattr(self, "_meta_cf"):
            return  # closed already
        try:
            if not self.config.wal:
                self.flush()  # what the memtables hold exists nowhere else on disk
        finally:
            self._release()

    def _release(self) -> None:
        """Close the database without flushing (nothing is lost that the changelog does
        not have: the store's checkpoint goes down with its data)."""
        if not hasattr(self, "_meta_cf"):
            return  # closed already
        try:
            try:
                self._meta.close()
            finally:
                self._db.close()
        except Exception as e:
            self._fail("close", e)
        finally:
            # The column family handle keeps the database, and its LOCK, alive: drop it
            # so the store can be opened again in this process (a task given up and
            # taken back).
            del self._meta_cf
