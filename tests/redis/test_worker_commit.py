"""A worker's commit of several tasks is one Redis transaction: every task's fence is
checked first, then everything is written, or nothing (see rstreams.runtime.engine.tasks.commit)."""

from __future__ import annotations

import pytest
from test_worker_fencing import upper_worker

from rstreams.errors import FencedError
from rstreams.runtime.engine.tasks import task as task_module
from rstreams.runtime.queues.redisstreams import RedisBroker, RedisTarget
from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership


def test_several_fences_one_moved_applies_nothing(redis_url: str) -> None:
    broker = RedisBroker.open(RedisTarget.parse(redis_url), "fences")
    broker.create_topic("out", 2)
    a, b = broker.key("fence:a"), broker.key("fence:b")
    broker.client.set(a, "1")
    broker.client.set(b, "1")
    with broker.transaction() as tx:
        tx.add_fence(a, "1")
        tx.append("out", 0, [(0, None, b"x", ())])
        tx.add_fence(b, "1")  # (a fence may join after operations)
        tx.append("out", 1, [(0, None, b"y", ()), (0, None, b"z", ())])
        tx.commit("g", "out", 0, 1)
    assert tx.ends() == {("out", 0): 1, ("out", 1): 2}
    broker.client.set(b, "2")  # task b was taken over
    with (
        pytest.raises(FencedError, match=r"fence:b holds '2', not '1'"),
        broker.transaction() as tx,
    ):
        tx.add_fence(a, "1")
        tx.add_fence(b, "1")
        tx.append("out", 0, [(0, None, b"late", ())])
        tx.commit("g", "out", 0, 2)
    assert broker.end_offsets([("out", 0), ("out", 1)]) == [1, 2]
    assert broker.committed("g", "out", 0) == 1
    broker.close()


def test_a_worker_with_one_task_fenced_out_writes_nothing_of_any(tmp_path, redis_url, caplog):
    worker, broker, client = upper_worker(tmp_path, redis_url, "wc", 3)
    for q in range(3):
        broker.append("in", q, [(0, None, f"a{q}".encode(), ())])
    worker.join(now=0.0)
    assert worker.step(now=0.0) == 3  # takes the three tasks, processes, commits
    assert sorted(r.value for r in broker.read("out", 0, 0)) == [b'"A0"', b'"A1"', b'"A2"']
    transactions = [("wc-transactions", q) for q in range(3)]
    ends = broker.end_offsets([("out", 0), *transactions])
    # The worker pauses past its lease; another member takes one of its tasks.
    task = sorted(worker.membership.held_tasks)[1]
    client.delete(worker.membership.task_fence(task)[0])
    other = RedisGroupMembership(client, "wc", "wc", "other")
    assert other.acquire_task(task)
    for q in range(3):
        broker.append("in", q, [(1, None, f"b{q}".encode(), ())])
    caplog.set_level("INFO", logger="rstreams")
    now = 0.2
    while "commit refused" not in caplog.text:  # (before its next heartbeat, at 0.5)
        assert now < 0.5
        worker.step(now=now)  # processes the b's; its one commit of three is refused
        now += 0.1
    assert not worker.tasks and "dropping its 3 task(s)" in caplog.text
    # Nothing of any of the three tasks landed: no output, no offset, no transaction.
    assert broker.end_offsets([("out", 0), *transactions]) == ends
    assert [broker.committed("wc", "in", q) for q in range(3)] == [1, 1, 1]
    # It takes back the two tasks still its own and redoes their work, exactly once.
    for now in (1.0, 1.1, 1.2, 1.3):
        worker.step(now=now)
    assert sorted(worker.membership.held_tasks) == ["0_0", "0_2"]
    assert [broker.committed("wc", "in", q) for q in range(3)] == [2, 1, 2]
    assert sorted(r.value for r in broker.read("out", 0, 0)) == [
        b'"A0"',
        b'"A1"',
        b'"A2"',
        b'"B0"',
        b'"B2"',
    ]
    worker.leave()
    other.leave()
    broker.close()


def test_a_big_worker_commit_is_several_transactions_of_whole_tasks(
    tmp_path, redis_url, monkeypatch
):
    monkeypatch.setattr(task_module, "MAX_TRANSACTION_RECORDS", 2)
    worker, broker, _ = upper_worker(tmp_path, redis_url, "big", 3)
    for q in range(3):
        broker.append("in", q, [(0, None, f"{w}{q}".encode(), ()) for w in "abc"])
    worker.join(now=0.0)
    assert worker.step(now=0.0) == 9  # a task's 3 records and transaction: one call each
    assert len(broker.read("out", 0, 0)) == 9
    assert [broker.committed("big", "in", q) for q in range(3)] == [3, 3, 3]
    worker.leave()
    broker.close()
