"""A worker of a Redis job whose task was taken while it paused drops it, never writes."""

from __future__ import annotations

from pathlib import Path

import redis

from rstreams import StreamBuilder
from rstreams.config import WorkerConfig
from rstreams.runtime.engine.coordination.worker import Worker
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.queues.eoiflags import RedisEoiFlags
from rstreams.runtime.queues.redisstreams import RedisBroker, RedisTarget
from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership


def upper_worker(
    tmp_path: Path, redis_url: str, job: str, queues: int
) -> tuple[Worker, RedisBroker, redis.Redis]:
    """A worker "w" of job ``job`` (in -> upper -> out, ``queues`` input queues) on Redis,
    exactly-once, committing every 0.1 s of its loop's clock."""
    b = StreamBuilder(job)
    b.source("in", queues=queues).map(str.upper).sink("out")
    client = redis.Redis.from_url(redis_url)
    broker = RedisBroker.open(RedisTarget.parse(redis_url), job)
    worker = Worker(
        b.build(), broker, tmp_path, member_id="w",
        engine=EngineConfig(guarantee="exactly-once", state="memory"),
        config=WorkerConfig(commit_interval=0.1),
        membership=RedisGroupMembership(client, job, job, "w"),
        eoi=RedisEoiFlags(client, job),
    )  # fmt: skip
    return worker, broker, client


def test_a_worker_fenced_out_drops_its_task_and_writes_nothing(tmp_path, redis_url, caplog):
    worker, broker, client = upper_worker(tmp_path, redis_url, "up", 1)
    broker.append("in", 0, [(0, None, b"hello", ())])
    worker.join(now=0.0)
    assert worker.step(now=0.0) == 1  # takes the only task, processes, commits
    assert [r.value for r in broker.read("out", 0, 0)] == [b'"HELLO"']
    (task,) = worker.membership.held_tasks
    # The worker pauses past its lease; another member takes its task meanwhile.
    client.delete(worker.membership.task_fence(task)[0])
    other = RedisGroupMembership(client, "up", "up", "other")  # (a member yet to join)
    assert other.acquire_task(task)
    broker.append("in", 0, [(1, None, b"again", ())])
    caplog.set_level("INFO", logger="rstreams")
    for now in (0.2, 0.3, 0.4):  # (before its next heartbeat, due at 0.5)
        worker.step(now=now)  # processes "again"; its commit is refused
    assert not worker.tasks  # dropped, and it goes on
    assert "commit refused" in caplog.text and "dropping its 1 task(s)" in caplog.text
    # Nothing of the refused commit is in Redis: the new owner goes on from offset 1.
    assert [r.value for r in broker.read("out", 0, 0)] == [b'"HELLO"']
    assert broker.committed("up", "in", 0) == 1
    worker.step(now=1.0)  # rebalanced: the task is still allocated to it, but taken
    assert not worker.tasks and worker.membership.held_tasks == []
    worker.leave()
    other.leave()
    broker.close()
