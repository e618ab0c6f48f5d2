"""The job lock over a real Redis: one owning run per job, the holder named when taken."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import redis

from rstreams.errors import JobRunningError
from rstreams.runtime.engine.redis_joblock import RedisJobLock


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def test_a_second_run_is_refused_naming_the_holder(redis_url: str) -> None:
    first = RedisJobLock(client(redis_url), "wordcount").acquire()
    try:
        with pytest.raises(JobRunningError) as refused:
            RedisJobLock(client(redis_url), "wordcount").acquire()
        message = str(refused.value)
        assert f"host {socket.gethostname()}, pid {os.getpid()}" in message
        assert "job 'wordcount' is already running" in message and "--join" in message
        assert "redis://" not in message  # (never the server's address or a password)
        holder = RedisJobLock(client(redis_url), "wordcount").holder()
        assert holder is not None and holder["pid"] == os.getpid() and "token" not in holder
        RedisJobLock(client(redis_url), "other-job").acquire().release()  # per job
    finally:
        first.release()
    assert RedisJobLock(client(redis_url), "wordcount").holder() is None
    RedisJobLock(client(redis_url), "wordcount").acquire().release()


def test_the_refresh_thread_keeps_the_lock_past_its_ttl(redis_url: str) -> None:
    lock = RedisJobLock(client(redis_url), "j", ttl=1.5).acquire()
    try:
        time.sleep(3.5)  # more than two leases long
        with pytest.raises(JobRunningError):
            RedisJobLock(client(redis_url), "j").acquire()
        assert lock.refresh() and not lock.lost
    finally:
        lock.release()


def test_a_lapsed_lock_taken_by_another_run_is_lost_and_not_released(redis_url: str) -> None:
    r = client(redis_url)
    lapsed = RedisJobLock(r, "j", ttl=0.2).acquire(refresh=False)
    while r.exists(lapsed.key):
        time.sleep(0.05)
    new = RedisJobLock(client(redis_url), "j").acquire()
    try:
        assert not lapsed.refresh() and lapsed.lost
        lapsed.release()  # must not delete the new owner's lock
        holder = new.holder()
        assert holder is not None and holder["pid"] == os.getpid()
        assert r.exists(new.key)
    finally:
        new.release()


def test_a_killed_owner_s_lock_expires(redis_url: str) -> None:
    code = textwrap.dedent(
        """
        import sys, time, redis
        from rstreams.runtime.engine.redis_joblock import RedisJobLock
        RedisJobLock(redis.Redis.from_url(sys.argv[1]), "j", ttl=3).acquire()
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", code, redis_url], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        with pytest.raises(JobRunningError, match=rf"pid {p.pid}\b.*expires within"):
            RedisJobLock(client(redis_url), "j").acquire()
        p.kill()
        p.wait()
        lock = RedisJobLock(client(redis_url), "j")
        while lock.holder() is not None:
            time.sleep(0.05)
        lock.acquire().release()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
