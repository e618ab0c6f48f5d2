"""Group membership in files, and the averagely allocation.

What files and Redis share (join, leave, generation, a hung member, exclusive task locks,
waiting for a change) is checked on both in tests/redis/test_membership_contract.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstreams.runtime.rebalance import AllocateAveragely, MessageQueue
from rstreams.runtime.rebalance.membership import FileGroupMembership


def test_dead_process_is_detected_at_once(tmp_path) -> None:
    # A member in another process, killed with SIGKILL: its lock goes with it.
    code = textwrap.dedent(
        f"""
        import time
        from rstreams.runtime.rebalance.membership import FileGroupMembership
        m = FileGroupMembership({str(tmp_path)!r}, "g", "victim")
        m.join()
        m.acquire_task("0_1")
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        me = FileGroupMembership(tmp_path, "g", "me")
        me.join()
        assert me.members() == ["me", "victim"]
        assert not me.acquire_task("0_1")  # held by the victim
        gen = me.generation()
        p.kill()
        p.wait()
        assert me.members() == ["me"]
        assert me.generation() == gen + 1  # the survivor told the group
        assert me.acquire_task("0_1")  # its tasks are free at once
    finally:
        if p.poll() is None:
            p.kill()


def qs(n: int) -> list[MessageQueue]:
    return [MessageQueue("t", "b", i) for i in range(n)]


def test_averagely_matches_rocketmq() -> None:
    s = AllocateAveragely()
    members = ["c0", "c1", "c2"]
    got = {c: [q.queue_id for q in s.allocate("g", c, qs(8), members)] for c in members}
    assert got == {"c0": [0, 1, 2], "c1": [3, 4, 5], "c2": [6, 7]}
    got = {c: [q.queue_id for q in s.allocate("g", c, qs(2), members)] for c in members}
    assert got == {"c0": [0], "c1": [1], "c2": []}
    # Ids sort as strings: "c10" < "c2".
    assert [q.queue_id for q in s.allocate("g", "c10", qs(2), ["c2", "c10"])] == [0]
    assert s.allocate("g", "zz", qs(2), ["a"]) == []
    for bad in (("", qs(1), ["a"]), ("a", [], ["a"]), ("a", qs(1), [])):
        with pytest.raises(ValueError):
            s.allocate("g", *bad)
    assert str(qs(1)[0]) == "MessageQueue [topic=t, brokerName=b, queueId=0]"


@given(
    n=st.integers(1, 64),
    members=st.sets(st.text("abc123", min_size=1, max_size=4), min_size=1, max_size=9),
)
def test_averagely_covers_every_queue_once_and_balances(n, members) -> None:
    s = AllocateAveragely()
    ids = sorted(members)
    shares = [s.allocate("g", m, qs(n), ids) for m in ids]
    flat = [q for share in shares for q in share]
    assert sorted(flat) == qs(n)
    sizes = [len(x) for x in shares]
    assert max(sizes) - min(sizes) <= 1
