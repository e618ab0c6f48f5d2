"""One contract for group membership, run on files and on a real Redis server.

What tests/unit/test_membership.py checks of FileGroupMembership, checked through the
GroupMembership protocol on both implementations. The differences are named where they
are: a dead member's files go at once (the kernel drops its lock), its Redis lease when
it expires (tests/redis/test_redis_membership.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from rstreams.runtime.rebalance.group import GroupMembership
from rstreams.runtime.rebalance.membership import FileGroupMembership
from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership

Make = Callable[..., GroupMembership]


@pytest.fixture(params=["file", "redis"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    """``make(member_id, session_timeout=5.0)``: a member of group "g" of job "job"."""
    made: list[GroupMembership] = []
    clients: list[redis.Redis] = []

    def file_member(member: str, session_timeout: float = 5.0) -> GroupMembership:
        return FileGroupMembership(tmp_path, "g", member, session_timeout)

    def redis_member(member: str, session_timeout: float = 5.0) -> GroupMembership:
        clients.append(redis.Redis.from_url(request.getfixturevalue("redis_url")))
        return RedisGroupMembership(
            clients[-1], "job", "g", member, session_timeout=session_timeout
        )

    factory = file_member if request.param == "file" else redis_member

    def tracked(member: str, session_timeout: float = 5.0) -> GroupMembership:
        made.append(factory(member, session_timeout))
        assert isinstance(made[-1], GroupMembership)
        return made[-1]

    yield tracked
    for m in made:
        m.leave()
    for c in clients:
        c.close()


def test_join_leave_and_generation(make: Make) -> None:
    a, b = make("a"), make("b")
    g0 = a.generation()
    a.join()
    b.join()
    assert a.generation() == g0 + 2
    assert a.members() == b.members() == ["a", "b"]
    b.leave()
    assert a.members() == ["a"]
    assert a.generation() == g0 + 3
    assert a.bump() == g0 + 4 == b.generation()


def test_hung_member_is_dropped_after_session_timeout(make: Make) -> None:
    a, b = make("a", 0.2), make("b", 0.2)
    a.join()
    b.join()
    time.sleep(0.3)
    a.heartbeat()
    assert a.members() == ["a"]  # b stopped heartbeating
    b.heartbeat()
    assert a.members() == ["a", "b"]


def test_task_locks_are_exclusive(make: Make) -> None:
    a, b = make("a"), make("b")
    assert a.acquire_task("1_0")
    assert a.acquire_task("1_0")  # held already
    assert not b.acquire_task("1_0")
    assert a.task_owners() == {"1_0": "a"}
    a.release_task("1_0")
    assert a.task_owners() == {}
    assert b.acquire_task("1_0")
    assert b.held_tasks == ["1_0"] and a.held_tasks == []
    assert b.task_owners() == {"1_0": "b"}
    b.leave()
    assert a.acquire_task("1_0")
    assert a.lost_tasks() == [] and b.lost_tasks() == []


def test_describe_lists_live_members_with_pid_and_heartbeat_age(make: Make) -> None:
    a, b, cli = make("a"), make("b"), make("cli")
    a.join()
    b.join()
    a.heartbeat()
    seen = cli.describe()
    assert sorted(seen) == ["a", "b"]
    for info in seen.values():
        assert isinstance(info["pid"], int)
        age = info["heartbeat_age_s"]
        assert isinstance(age, float | int) and age >= 0


def test_wait_for_change_returns_on_a_change_and_only_then(make: Make) -> None:
    a, b, c = make("a"), make("b"), make("c")
    a.join()
    a.generation()
    assert not a.wait_for_change(0)
    assert not a.wait_for_change(0.1)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(a.wait_for_change(60)))
    waiter.start()
    try:
        b.join()  # the waiter returns True, long before its timeout
    finally:
        waiter.join(60)
    assert got == [True]
    assert not a.wait_for_change(0)  # that change was seen
    c.join()
    c.leave()
    assert a.wait_for_change(0)  # two changes since, seen as one
    assert not a.wait_for_change(0)
    b.leave()
    assert a.wait_for_change(60)
