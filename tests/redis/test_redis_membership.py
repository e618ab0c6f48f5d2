"""Group membership over a real Redis: leases that expire, pushed changes, fencing.

(The behaviours shared with files are in test_membership_contract.py.)
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redisserver import RedisServer

from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership, job_prefix

# A member in its own process: joins, takes task 0_1, says "ready", heartbeats until killed.
VICTIM = """
import sys, time, redis
from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership
m = RedisGroupMembership(redis.Redis.from_url(sys.argv[1]), "job", "g", "victim",
                         session_timeout=2.0)
m.join()
assert m.acquire_task("0_1")
print("ready", flush=True)
while True:
    m.heartbeat()
    time.sleep(0.1)
"""


@pytest.fixture
def victim(redis_url: str) -> Iterator[subprocess.Popen[str]]:
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(VICTIM), redis_url],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def member(url: str, name: str, timeout: float = 5.0, **kw: object) -> RedisGroupMembership:
    client = redis.Redis.from_url(url, **kw)  # type: ignore[arg-type]
    return RedisGroupMembership(client, "job", "g", name, session_timeout=timeout)


def test_a_killed_member_expires_and_the_survivor_checking_leases_is_told(
    redis_url: str, victim: subprocess.Popen[str]
) -> None:
    # No keyspace notifications on this server: the survivor notices on its heartbeat.
    me = member(redis_url, "me")
    me.join()
    assert me.members() == ["me", "victim"]
    assert not me.acquire_task("0_1")  # held by the victim
    assert me.task_owners() == {"0_1": "victim"}
    gen = me.generation()
    victim.kill()
    while me.members() != ["me"]:  # the worker's heartbeat loop
        me.heartbeat()
        time.sleep(0.05)
    assert me.wait_for_change(60)
    assert me.generation() == gen + 1  # the survivor told the group, once
    assert me.task_owners() == {}  # the victim's task lease expired with it
    assert me.acquire_task("0_1")
    me.leave()


def test_with_keyspace_notifications_the_waiter_is_told_of_the_expiry_itself(
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path, extra=("--notify-keyspace-events", "Kx")).start()
    try:
        url = server.url
        p = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(VICTIM), url], stdout=subprocess.PIPE, text=True
        )
        try:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            me = member(url, "me", timeout=60)
            me.join()
            assert me.members() == ["me", "victim"]
            gen = me.generation()
            p.kill()
            # Only waiting, no heartbeat or members() of its own: the expiry wakes it.
            assert me.wait_for_change(60)
            assert me.generation() == gen + 1
            assert me.members() == ["me"]
            me.leave()
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()
    finally:
        server.stop()


def test_a_member_whose_lease_ran_out_is_fenced_and_finds_out(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    slow, other = member(redis_url, "slow", timeout=0.3), member(redis_url, "other")
    slow.join()
    other.join()
    assert slow.acquire_task("0_1")
    key, value = slow.task_fence("0_1")
    assert r.get(key) == value.encode() and value.startswith("slow#")
    while r.exists(key):  # slow pauses (no heartbeat): its lease runs out
        time.sleep(0.05)
    assert other.acquire_task("0_1")
    assert r.get(key) != value.encode()
    _, new_value = other.task_fence("0_1")
    assert new_value.startswith("other#") and new_value != value
    # A commit fenced the way the broker fences: nothing applied for slow, all for other.
    assert not fenced_write(r, (key, value), "out", "from slow")
    assert fenced_write(r, (key, new_value), "out", "from other")
    assert r.lrange("out", 0, -1) == [b"from other"]
    gen = other.generation()
    slow.heartbeat()  # finds its task lost, and joins again (its own lease ran out too)
    assert slow.lost_tasks() == ["0_1"] and slow.held_tasks == []
    assert slow.task_fence("0_1") == (key, value)  # still refused, should it try
    assert other.wait_for_change(60) and other.generation() > gen
    assert other.members() == ["other", "slow"]
    slow.release_task("0_1")  # forgets it: the new owner keeps it
    assert slow.lost_tasks() == [] and other.task_owners() == {"0_1": "other"}
    slow.leave()
    other.leave()


def fenced_write(r: redis.Redis, fence: tuple[str, str], key: str, value: str) -> bool:
    """A write applied only while the fence key holds its value (as a broker commit)."""
    script = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    script += "redis.call('RPUSH', KEYS[2], ARGV[2]) return 1"
    return bool(r.eval(script, 2, fence[0], key, fence[1], value))


def test_a_held_task_taken_meanwhile_is_reported_lost_by_acquire(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    a, b = member(redis_url, "a", timeout=0.3), member(redis_url, "b")
    assert a.acquire_task("t")
    while r.exists(a.task_fence("t")[0]):
        time.sleep(0.05)
    assert b.acquire_task("t")
    assert not a.acquire_task("t")
    assert a.lost_tasks() == ["t"]
    a.release_task("t")
    assert not a.acquire_task("t")  # b holds it
    b.leave()
    assert a.acquire_task("t") and a.lost_tasks() == []


def test_keys_sit_under_the_jobs_hash_tag_and_decoded_clients_work(redis_url: str) -> None:
    m = member(redis_url, "m", decode_responses=True)
    m.join()
    assert m.acquire_task("0_0")
    assert m.members() == ["m"] and m.task_owners() == {"0_0": "m"}
    assert m.describe()["m"]["pid"] is not None
    assert m.wait_for_change(0) and not m.wait_for_change(0)
    keys = redis.Redis.from_url(redis_url, decode_responses=True).keys("*")
    assert keys and all(k.startswith("rs:{job}:g:") for k in keys)
    m.leave()
    with pytest.raises(ValueError, match="braces"):
        job_prefix("a}b")
