"""Small file-system helpers of the file log, and its error for damaged files.

Shared by :mod:`~rstreams.runtime.queues.filelog` (segments, metadata) and
:mod:`~rstreams.runtime.queues.offsets` (committed group offsets).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

from rstreams.errors import ConfigError, RStreamsError
from rstreams.runtime.faults import maybe_fail
from rstreams.runtime.layout import JobLayout

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")


class CorruptLogError(RStreamsError, RuntimeError):
    """Data of a queue is damaged or missing: not a torn write that may be dropped.

    Raised for a bad frame with valid frames after it or below the queue's durable point,
    a log that ends below an offset that was synced, committed by a group or referenced
    by a transaction, a closed segment cut short, and damaged offset or metadata files.
    Carries ``topic``, ``queue``, ``segment`` (the damaged file), ``position`` (its byte,
    or None) and ``offset`` (the first offset that cannot be read, or None). The message
    ends with what to do next.
    """

    def __init__(
        self,
        topic: str,
        queue: int | None,
        segment: str,
        position: int | None,
        reason: str,
        *,
        offset: int | None = None,
        root: str | Path | None = None,
    ) -> None:
        where = f"{topic!r}" if queue is None else f"{topic!r}[{queue}]"
        at = f"{segment}" + (f" at byte {position}" if position is not None else "")
        if offset is not None:
            at += f" (offset {offset})"
        super().__init__(
            f"corrupt log {where}: {at}: {reason}. {_repair_advice(root, topic, queue, offset)}"
        )
        self.topic = topic
        self.queue = queue
        self.segment = segment
        self.position = position
        self.offset = offset
        self.reason = reason


def _repair_advice(
    root: str | Path | None, topic: str, queue: int | None, offset: int | None
) -> str:
    """The next step, as commands: see every damage, cut it, rebuild the job."""
    where = ""
    job = JobLayout.of_log(root) if root is not None else None
    if job is not None:  # a job's log
        where = f" --data-dir {job.data_dir} --job {job.job}"
    cut = ""
    if queue is not None and offset is not None:
        repair = f"rstreams topics repair {topic} --queue {queue} --truncate-at {offset}"
        cut = f", cut it with `{repair}{where}`"
    return (
        f"List every damaged file with `rstreams topics check{where}`{cut}, then rebuild the "
        f"job from its input with `rstreams run ... --fresh` "
        f"(docs/state.md#recovering-from-damage)"
    )


def _encode_name(name: str) -> str:
    """A file name for a topic/group name: itself if plain, else percent-encoded."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"names must be non-empty strings; got {name!r}")
    enc = name if _SAFE_NAME.match(name) else quote(name, safe="")
    if enc.startswith("."):
        enc = "%2E" + enc[1:]
    if len(enc.encode()) > 200:
        raise ConfigError(f"name {name!r} is too long for a file name ({len(enc)} characters)")
    return enc


def with_path(e: OSError, path: str | Path) -> OSError:
    """``e`` naming the file it was about (an error of a write to a descriptor names
    none): a full disk's error then says which file system filled up."""
    if e.filename is not None:
        return e
    named = OSError(e.errno, e.strerror, str(path))
    named.__traceback__ = e.__traceback__
    return named


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        maybe_fail("log-sync", path)
        os.fsync(fd)
    except OSError as e:
        raise with_path(e, path) from None
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n


#: Threads that sync files at once (see :func:`in_parallel`).
SYNC_THREADS = 8
_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def in_parallel(calls: Sequence[Callable[[], None]]) -> None:
    """Run ``calls`` (blocking file-system work: fsyncs) on a few threads and return
    once every one has returned; then raise the error of the first that failed, if any.

    Why: a journaling file system commits concurrent fsyncs together, so 40 files synced
    at once take about as long as one (5 ms on a virtual disk), one after another 40
    times as long. Every call still completes before this returns: the same durability.
    """
    if len(calls) <= 1:
        for call in calls:
            call()
        return
    futures = [_executor().submit(call) for call in calls[1:]]
    errors: list[BaseException] = []
    try:
        calls[0]()
    except BaseException as e:
        errors.append(e)
    for f in futures:  # (each waits for its call: none is left running)
        if (error := f.exception()) is not None:
            errors.append(error)
    if errors:
        raise errors[0]


def _executor() -> ThreadPoolExecutor:
    """This process's sync threads (a forked child makes its own)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            executor = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="rstreams-sync")
            _pool = (os.getpid(), executor)
        return _pool[1]


def _atomic_write(path: Path, data: bytes, *, sync: bool, point: str = "") -> None:
    """Write a small file by temp file + fsync + rename (+ fsync of the directory);
    ``point`` is its fault point (see :mod:`rstreams.runtime.faults`)."""
    _atomic_write_many([(path, data)], sync=sync, point=point)


def _atomic_write_many(files: Sequence[tuple[Path, bytes]], *, sync: bool, point: str = "") -> None:
    """:func:`_atomic_write` of each (path, data), syncing them all at once: every
    temporary file is written, synced (in parallel) and renamed into place, then every
    directory is synced (in parallel). An error leaves every file it did not rename
    whole, as it was, and no temporary file behind."""
    tmps = [
        path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        for path, _ in files
    ]
    written: list[tuple[int, Path]] = []
    try:
        try:
            for (path, data), tmp in zip(files, tmps, strict=True):
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                written.append((fd, path))
                if point:
                    maybe_fail(point, path)
                _write_all(fd, data, 0)
            if sync:
                in_parallel([functools.partial(_fsync_file, fd, path) for fd, path in written])
        finally:
            for fd, _ in written:
                os.close(fd)
    except OSError as e:
        # (a full disk: the old files stay whole, and no temporary file is left behind)
        for tmp in tmps:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise with_path(e, files[len(written) - 1][0] if written else files[0][0]) from None
    for (path, _), tmp in zip(files, tmps, strict=True):
        os.replace(tmp, path)
    if sync:
        dirs = list(dict.fromkeys(path.parent for path, _ in files))
        in_parallel([functools.partial(_fsync_dir, d) for d in dirs])


def _fsync_file(fd: int, path: Path) -> None:
    try:
        os.fsync(fd)
    except OSError as e:
        raise with_path(e, path) from None


def _makedirs(path: Path, *, sync: bool) -> None:
    """``mkdir -p`` that also makes the new directory entries durable."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir()
        if sync:
            _fsync_dir(d.parent)


class FileLock:
    """Exclusive between threads (RLock) and processes (flock); re-entrant in a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.RLock()
        self._fd = -1
        self._pid = -1
        self._depth = 0

    def __enter__(self) -> FileLock:
        self._mutex.acquire()
        if self._depth == 0:
            try:
                if self._fd < 0 or self._pid != os.getpid():  # a forked child needs its own
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                    self._pid = os.getpid()
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            except BaseException:
                self._mutex.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._mutex.release()

    def close(self) -> None:
        with self._mutex:
            if self._fd >= 0 and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = -1
