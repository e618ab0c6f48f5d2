"""One job, one owning run, over Redis: the job lock for workers on several hosts.

The file :class:`~rstreams.runtime.queues.joblock.JobLock` guards a data directory on
one machine. With a Redis broker the job's data sits in Redis, so the lock does too: the
key ``rs:{<job>}:lock`` holds the owner's host, pid, start time and a random token,
with a lease (PX ``ttl``) that a refresh thread renews every ``ttl / 3`` seconds. A
second ``rstreams run`` of the job is refused with the holder's host and pid; a
supervisor started with ``--join`` does not take the lock but checks with
:meth:`RedisJobLock.holder` that a run is there to join.

A dead owner (``kill -9``, a lost host) leaves its key until the lease runs out (at most
``ttl`` seconds); the refusal says so.

**Generation.** Every acquisition increments ``rs:{<job>}:lock:gen`` in the same script
that takes the lock, and the owner's writes are fenced by it (:attr:`RedisJobLock.fence`,
checked on the server in the same step as the write): the supervisor's appends to the
source topics, its end-of-input records and its copies to external streams. An owner
that paused longer than its lease (SIGSTOP, a clock step on the Redis host, a paused
redis-server) either finds the lock free with the generation unchanged, and takes it back
(nobody owned the job meanwhile), or finds that another run took it: then the refresh
stops, :attr:`RedisJobLock.lost` is set, ``on_lost`` is called, and every fenced write
of this owner is refused (:class:`~rstreams.errors.FencedError`), so nothing it appends
after the other run started can count twice. The supervisor then stops with
:class:`~rstreams.errors.JobLockLostError` (exit 1). Workers' commits are fenced per task
(see redis_membership).
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

from rstreams.errors import JobLockLostError, JobRunningError
from rstreams.runtime.rebalance.redis_membership import DELETE_IF_HELD, job_prefix, text

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)

#: Lua: take the lock KEYS[1] (value ARGV[1], lease ARGV[2] ms) if free, and increment
#: the generation KEYS[2] in the same step; the new generation, or 0 if taken.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
"""

#: Lua: renew the lease of KEYS[1] if it holds ARGV[1] (1); if it lapsed and nobody took
#: the lock since (the generation KEYS[2] is still ARGV[3]), take it back (2); else 0.
_RENEW = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v and redis.call('GET', KEYS[2]) == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""


def lock_keys(job_id: str) -> tuple[str, str]:
    """The keys of job ``job_id``'s lock: the lock and its generation."""
    key = f"{job_prefix(job_id)}:lock"
    return key, f"{key}:gen"


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
        self.key, self.gen_key = lock_keys(job_id)
        self.ttl_ms = max(1, int(ttl * 1000))
        self.on_lost = on_lost
        #: Set when the lock was found taken by another run while this one held it.
        self.lost = False
        self._value: str | None = None
        #: The generation this owner took the lock with (see the module docstring).
        self.generation: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(DELETE_IF_HELD)
        self._renew = client.register_script(_RENEW)

    @property
    def fence(self) -> tuple[str, str] | None:
        """``(key, value)`` that the owner's writes check (the broker's ``fence``): they
        apply only while no other run took the lock since this one did."""
        if self.generation is None:
            return None
        return self.gen_key, str(self.generation)

    def lost_error(self) -> JobLockLostError:
        holder = self.holder() if self._reachable() else None
        who = (
            f" (now host {holder.get('host', '?')}, pid {holder.get('pid', '?')})" if holder else ""
        )
        return JobLockLostError(
            f"job {self.job_id!r}: another run took the job lock{who} while this one was "
            f"paused past its {self.ttl_ms / 1000:g} s lease (a stopped process, a clock "
            "step or a paused Redis); this run stopped writing at once and wrote no "
            "table. Its committed work is safe: let the other run finish, or stop it "
            "and run the same command again"
        )

    def _reachable(self) -> bool:
        try:
            self.client.ping()
        except Exception:
            return False
        return True

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
        generation = int(self._acquire(keys=[self.key, self.gen_key], args=[value, self.ttl_ms]))
        if not generation:
            raise self._running_error()
        self._value, self.generation, self.lost = value, generation, False
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
        if self._value is None or self.lost:
            return False
        renewed = int(
            self._renew(
                keys=[self.key, self.gen_key], args=[self._value, self.ttl_ms, self.generation or 0]
            )
        )
        if renewed == 2:
            log.warning(
                "job lock of %r: its lease ran out (a pause?); nobody took it since: taken back",
                self.job_id,
            )
        if renewed:
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
