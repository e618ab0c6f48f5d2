"""One job, one owning run, over Redis: the job lock for workers on several hosts.

The file :class:`~rstreams.runtime.engine.joblock.JobLock` guards a data directory on
one machine. With a Redis broker the job's data sits in Redis, so the lock does too: the
key ``rs:{<job>}:lock`` holds the owner's host, pid, start time and a random token,
with a lease (PX ``ttl``) that a refresh thread renews every ``ttl / 3`` seconds. A
second ``rstreams run`` of the job is refused with the holder's host and pid; a
supervisor started with ``--join`` does not take the lock but checks with
:meth:`RedisJobLock.holder` that a run is there to join.

A dead owner (``kill -9``, a lost host) leaves its key until the lease runs out (at most
``ttl`` seconds); the refusal says so. An owner that paused longer than its lease may
find the lock taken: the refresh then stops, :attr:`RedisJobLock.lost` is set and
``on_lost`` is called. The lock only refuses a second owner; what keeps two owners from
writing twice is the fencing of every commit (see redis_membership).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rstreams.errors import JobRunningError
from rstreams.runtime.rebalance.redis_membership import (
    DELETE_IF_HELD,
    RENEW_IF_HELD,
    job_prefix,
    text,
)

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)


class RedisJobLock:
    """The lock of job ``job_id`` in the Redis of ``client``, held for ``ttl`` seconds
    at a time and renewed by a thread while held."""

    def __init__(
        self,
        client: redis.Redis,
        job_id: str,
        *,
        ttl: float = 10.0,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.key = f"{job_prefix(job_id)}:lock"
        self.ttl_ms = max(1, int(ttl * 1000))
        self.on_lost = on_lost
        #: Set when the lock was found taken by another run while this one held it.
        self.lost = False
        self._value: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._release = client.register_script(DELETE_IF_HELD)
        self._renew = client.register_script(RENEW_IF_HELD)

    def acquire(self, refresh: bool = True) -> RedisJobLock:
        """Take the lock, or raise JobRunningError naming the run that holds it (its
        host and pid). ``refresh``: renew it from a thread until :meth:`release`."""
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        value = json.dumps(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "since": since,
                "token": uuid.uuid4().hex,
            }
        )
        if not self.client.set(self.key, value, nx=True, px=self.ttl_ms):
            raise self._running_error()
        self._value, self.lost = value, False
        if refresh:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._refresh_loop, name=f"joblock-{self.job_id}", daemon=True
            )
            self._thread.start()
        return self

    def _running_error(self) -> JobRunningError:
        holder = self.holder() or {}
        pid, host = holder.get("pid", "?"), holder.get("host", "?")
        expires = holder.get("expires_in_s")
        lease = f"; if that run is dead, its lock expires within {expires} s" if expires else ""
        return JobRunningError(
            f"job {self.job_id!r} is already running (host {host}, pid {pid}, since "
            f"{holder.get('since', '?')}) on this Redis{lease}; wait for it to finish, "
            f"stop it (on {host}: kill -TERM {pid}), or join it with --join"
        )

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock (host, pid, since, expires_in_s), or None if nobody."""
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self.key)
        pipe.pttl(self.key)
        value, pttl = pipe.execute()
        if value is None:
            return None
        try:
            holder = json.loads(text(value))
        except ValueError:
            holder = None
        out: dict[str, Any] = holder if isinstance(holder, dict) else {}
        out.pop("token", None)
        if int(pttl) >= 0:
            out["expires_in_s"] = round(int(pttl) / 1000, 1)
        return out

    def refresh(self) -> bool:
        """Renew the lease; False (and :attr:`lost` set) if the lock is no longer ours."""
        if self._value is None:
            return False
        if self._renew(keys=[self.key], args=[self._value, self.ttl_ms]):
            return True
        self.lost = True
        return False

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                if self.refresh():
                    continue
            except Exception as e:  # (Redis unreachable: try again, the lease may last)
                log.warning("job lock of %r: renewing failed: %r", self.job_id, e)
                continue
            log.error("job lock of %r: taken by another run while this one held it", self.job_id)
            if self.on_lost is not None:
                self.on_lost()
            return

    def release(self) -> None:
        """Stop renewing and give the lock back, only if it is still ours."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        value, self._value = self._value, None
        if value is not None:
            try:
                self._release(keys=[self.key], args=[value])
            except Exception as e:  # (Redis unreachable: the lease runs out by itself)
                log.warning("job lock of %r: releasing failed: %r", self.job_id, e)
