"""One job, one run: a lock on a job's data directory for as long as a run uses it.

Two runs of one job over the same data directory would both ingest the whole input
(every count doubled, for good). The supervisor therefore holds an exclusive
``flock`` on ``<data dir>/.<job id>.lock`` from before ``--fresh`` deletes anything
until the run has closed its log. The kernel drops the lock when the holding process
dies, however it dies, so a lock left by a dead run never blocks the next one; the
file only tells the refused run who holds it (pid, start time). Worker processes do not
inherit it (subprocesses get no descriptors but their standard ones), so orphaned
workers, which stop when their supervisor is gone, do not hold it either. With a Redis
broker, whose runs may span several hosts, ``RedisJobLock`` (redis_joblock.py) plays
this part.

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> first = JobLock(d, "wordcount").acquire()
    >>> JobLock(d, "wordcount").acquire()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rstreams.errors.JobRunningError: job 'wordcount' is already running (pid ..., since ...)...
    >>> first.release()
    >>> JobLock(d, "wordcount").acquire().release()
"""

from __future__ import annotations

import fcntl
import json
import os
import time

from rstreams.errors import JobRunningError
from rstreams.runtime.layout import JobLayout


class JobLock:
    """The exclusive lock of job ``job_id`` in ``data_dir``."""

    def __init__(self, data_dir: str | os.PathLike[str], job_id: str) -> None:
        self.job_id = job_id
        self.path = JobLayout.of(data_dir, job_id).lock
        self._fd: int | None = None

    def acquire(self) -> JobLock:
        """Take the lock, or raise JobRunningError naming the run that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            pid = holder.get("pid", "?")
            raise JobRunningError(
                f"job {self.job_id!r} is already running (pid {pid}, since "
                f"{holder.get('since', '?')}) on data directory {str(self.path.parent)!r}; "
                f"wait for it to finish, stop it (kill -TERM {pid}), or give this run "
                "another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.write(fd, json.dumps({"pid": os.getpid(), "since": since}).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock back (the file stays: removing it would race a new holder)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _read_holder(fd: int) -> dict[str, object]:
    try:
        data = os.pread(fd, 4096, 0)
        holder = json.loads(data) if data else {}
        return holder if isinstance(holder, dict) else {}
    except (OSError, ValueError):
        return {}
