"""A worker driven turn by turn with Worker.step(now) in this process, over the real file
log, on a clock the test moves: timers are tested without sleeping."""

from __future__ import annotations

import collections
import json
import os
import re
import time

import pytest

import rstreams.runtime.engine.coordination.local as local
import rstreams.runtime.rebalance.membership as membership
from rstreams import StreamBuilder
from rstreams.runtime.engine.coordination.worker import Worker, WorkerConfig, open_broker
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.tasks.taskid import TaskId
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.rebalance.membership import FileGroupMembership

pytestmark = pytest.mark.fast  # in ./dev test --fast (see pyproject.toml's markers)

GUARANTEES = ["at-least-once", "exactly-once"]


def wordcount():
    b = StreamBuilder("wc")
    (
        b.source("lines", queues=2)
        .flatMap(lambda v: re.findall(r"\w+", v.lower()))
        .keyBy(lambda w: w)
        .count(name="count", queues=2)
        .sink("counts")
    )
    return b.build()


def upper():
    b = StreamBuilder("up")
    b.source("in", queues=1).map(str.upper).sink("out")
    return b.build()


def append(broker: Broker, topic: str, queue: int, values: list[str]) -> None:
    broker.append(topic, queue, [(0, None, v.encode(), ()) for v in values])


def run_until_idle(worker: Worker, now: float, tick: float = 0.01) -> float:
    """Step ``worker`` in turns ``tick`` apart from ``now`` until it owns the tasks it
    wants and has processed and committed all their input; returns the time reached."""
    for _ in range(10_000):
        now += tick
        moved = worker.step(now)
        tasks = worker.tasks.values()
        if (
            not moved
            and len(worker.tasks) == len(worker.wanted)
            and not any(t.lag() or t.uncommitted for t in tasks)
        ):
            return now
    raise AssertionError("the worker did not finish")


def test_maintenance_purges_shuffles_and_compacts_changelogs(tmp_path, monkeypatch, corpus_lines):
    monkeypatch.setattr(local, "INTERNAL_SEGMENT_BYTES", 2048)  # many small segments
    topology = wordcount()
    broker = open_broker(tmp_path)
    config = WorkerConfig(compact_min_records=0)
    worker = Worker(topology, broker, tmp_path, member_id="w", config=config)
    lines = corpus_lines[:3000]
    now = 0.0
    worker.join(now)
    for i in range(0, len(lines), 100):  # many commits: many changelog updates per key
        append(broker, "lines", (i // 100) % 2, lines[i : i + 100])
        now = run_until_idle(worker, now)
    shuffle, changelog = "wc-count-shuffle", "wc-count-changelog"
    before = [(broker.start_offset(shuffle, q), broker.end_offset(changelog, q)) for q in (0, 1)]
    changelog_records = sum(len(broker.read(changelog, q, 0)) for q in (0, 1))
    done = worker.maintain()
    assert done["purged_queues"] == 2 and done["compacted_records"] > 0
    for q in (0, 1):
        assert broker.start_offset(shuffle, q) > before[q][0]  # consumed segments gone
    assert sum(len(broker.read(changelog, q, 0)) for q in (0, 1)) < changelog_records
    # Restoring from the compacted changelog gives the same state.
    expected = collections.Counter(w for line in lines for w in re.findall(r"\w+", line.lower()))
    worker.leave()
    again = Worker(topology, open_broker(tmp_path), tmp_path, member_id="w2")
    again.join(0.0)
    again.step(0.0)  # the first turn takes every task: restored before it is started
    state: dict[str, int] = {}
    for task in again.tasks.values():
        if "wc-count-store" in task.stores:
            state.update(task.stores["wc-count-store"].items())
    again.leave()
    assert state == dict(expected)


# -- timers: Worker.step(now) on a clock the test moves -------------------------------


def committed(broker: Broker, group: str, topic: str, queue: int = 0) -> int:
    return broker.committed(group, topic, queue)


def outputs(broker: Broker) -> list[str]:
    return [json.loads(r.value) for r in broker.read("out", 0, 0)]


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_busy_worker_commits_when_the_commit_interval_has_passed_and_not_before(
    tmp_path, guarantee
) -> None:
    broker = open_broker(tmp_path)
    config = WorkerConfig(commit_interval=1.0, batch_size=10)  # 10 records a turn: busy
    engine = EngineConfig(guarantee=guarantee)
    worker = Worker(upper(), broker, tmp_path, member_id="w", config=config, engine=engine)
    append(broker, "in", 0, [f"r{i}" for i in range(1000)])
    worker.join(100.0)
    assert worker.step(100.0) == 10  # the first turn commits at once
    assert committed(broker, "up", "in") == 10
    for now in (100.3, 100.6, 100.99):
        assert worker.step(now) == 10
        assert committed(broker, "up", "in") == 10  # input keeps coming: the timer waits
    assert worker.step(101.0) == 10
    assert committed(broker, "up", "in") == 50
    assert worker.step(101.5) == 10
    assert committed(broker, "up", "in") == 50
    assert worker.step(102.0) == 10
    assert committed(broker, "up", "in") == 70
    assert len(broker.read("out", 0, 0)) == 70
    worker.leave()
    assert committed(broker, "up", "in") == 70  # leaving commits what it processed


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_worker_whose_input_ran_dry_commits_after_a_tenth_of_the_interval(
    tmp_path, guarantee
) -> None:
    broker = open_broker(tmp_path)
    config = WorkerConfig(commit_interval=10.0)
    engine = EngineConfig(guarantee=guarantee)
    worker = Worker(upper(), broker, tmp_path, member_id="w", config=config, engine=engine)
    worker.join(0.0)
    assert worker.step(0.0) == 0  # takes the task; commits nothing
    append(broker, "in", 0, ["a", "b", "c"])
    assert worker.step(0.2) == 3
    assert worker.step(0.5) == 0
    assert committed(broker, "up", "in") == 0  # dry, but the last commit was at 0
    assert worker.step(1.0) == 0
    assert committed(broker, "up", "in") == 3
    assert outputs(broker) == ["A", "B", "C"]
    append(broker, "in", 0, ["d"])
    assert worker.step(1.2) == 1
    assert worker.step(1.9) == 0
    assert committed(broker, "up", "in") == 3  # a tenth of the interval after 1.0: at 2.0
    assert worker.step(2.0) == 0
    assert committed(broker, "up", "in") == 4
    worker.leave()


def heartbeat_of(worker: Worker) -> float:
    path = worker.membership.members_dir / f"{worker.member_id}.json"
    return float(json.loads(path.read_text())["heartbeat"])


def test_heartbeats_happen_on_their_timer(tmp_path) -> None:
    config = WorkerConfig(heartbeat_interval=0.5)
    worker = Worker(upper(), open_broker(tmp_path), tmp_path, member_id="w", config=config)
    worker.join(0.0)
    worker.step(0.0)
    first = heartbeat_of(worker)
    worker.step(0.49)
    assert heartbeat_of(worker) == first
    worker.step(0.5)
    second = heartbeat_of(worker)
    assert second > first
    worker.step(0.99)
    assert heartbeat_of(worker) == second
    worker.step(1.0)
    assert heartbeat_of(worker) > second
    worker.leave()


def test_a_worker_rebalances_at_once_when_a_member_joins(tmp_path) -> None:
    topology = wordcount()  # two sub-topologies on two queues: four tasks
    worker = Worker(topology, open_broker(tmp_path), tmp_path, member_id="a")
    worker.join(0.0)
    worker.step(0.0)
    assert sorted(worker.tasks) == [TaskId(0, 0), TaskId(0, 1), TaskId(1, 0), TaskId(1, 1)]
    other = FileGroupMembership(tmp_path, topology.job_id, "b")
    other.join()  # moves the group's generation
    worker.step(0.01)
    assert sorted(worker.tasks) == worker.wanted and len(worker.tasks) == 2
    assert sorted(other.task_owners()) == [str(t) for t in worker.wanted]  # others released
    other.leave()
    worker.step(0.02)
    assert len(worker.tasks) == 4
    worker.leave()


def test_a_worker_asked_to_stop_takes_over_no_task_of_a_member_that_left(tmp_path) -> None:
    topology = wordcount()
    other = FileGroupMembership(tmp_path, topology.job_id, "b")
    other.join()
    worker = Worker(topology, open_broker(tmp_path), tmp_path, member_id="a")
    worker.join(0.0)
    worker.step(0.0)
    assert len(worker.tasks) == 2
    other.leave()  # the other member stops first
    worker.stop()  # this one was asked to stop as well, before it noticed
    worker.step(0.01)
    assert len(worker.wanted) == 4 and len(worker.tasks) == 2
    worker.leave()


def test_a_worker_rebalances_on_its_timer_when_the_generation_does_not_move(
    tmp_path, monkeypatch
) -> None:
    """A member that hangs (its heartbeat stops, its process lives) moves no generation:
    only the periodic rebalance gives its share to the others."""
    topology = wordcount()
    config = WorkerConfig(rebalance_interval=20.0)
    worker = Worker(topology, open_broker(tmp_path), tmp_path, member_id="a", config=config)
    other = FileGroupMembership(tmp_path, topology.job_id, "b")
    other.join()
    worker.join(0.0)
    worker.step(0.0)
    assert len(worker.tasks) == 2
    # b's last heartbeat was long ago: the others no longer count it.
    wall = time.time()
    monkeypatch.setattr(membership.time, "time", lambda: wall - 60)
    other.heartbeat()
    monkeypatch.undo()
    for now in (0.5, 10.0, 19.99):
        worker.step(now)
        assert len(worker.tasks) == 2
    worker.step(20.0)
    assert len(worker.tasks) == 4
    worker.leave()
    other.leave()


def test_maintenance_runs_on_its_timer(tmp_path, monkeypatch, corpus_lines) -> None:
    monkeypatch.setattr(local, "INTERNAL_SEGMENT_BYTES", 2048)  # many small segments
    broker = open_broker(tmp_path)
    config = WorkerConfig(maintenance_interval=30.0)
    worker = Worker(wordcount(), broker, tmp_path, member_id="w", config=config)
    worker.join(0.0)
    append(broker, "lines", 0, corpus_lines[:300])
    now = run_until_idle(worker, 0.0)
    assert now < 30.0
    shuffle = "wc-count-shuffle"
    starts = [broker.start_offset(shuffle, q) for q in (0, 1)]
    worker.step(29.99)
    assert [broker.start_offset(shuffle, q) for q in (0, 1)] == starts
    worker.step(30.0)  # consumed shuffle segments are purged
    assert all(broker.start_offset(shuffle, q) > s for q, s in enumerate(starts))
    worker.leave()


def test_a_worker_whose_supervisor_is_gone_stops_without_working(tmp_path) -> None:
    worker = Worker(upper(), open_broker(tmp_path), tmp_path, member_id="w")
    worker.parent_pid = os.getppid() + 1  # not our parent: the supervisor died
    worker.join(0.0)
    assert worker.step(0.0) == 0
    assert worker.stop_event.is_set() and not worker.tasks
    worker.leave()


def test_run_loops_step_until_stopped(tmp_path) -> None:
    import threading

    broker = open_broker(tmp_path)
    worker = Worker(upper(), broker, tmp_path, member_id="w")
    append(broker, "in", 0, ["x", "y"])
    thread = threading.Thread(target=worker.run)
    thread.start()
    deadline = time.monotonic() + 30
    while committed(broker, "up", "in") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert committed(broker, "up", "in") == 2
    assert outputs(broker) == ["X", "Y"]
    assert worker.processed == 2 and not worker.tasks  # left: gave every task up


def test_a_worker_stopped_during_a_turn_runs_no_other_task_in_it(tmp_path) -> None:
    """Asked to stop (SIGTERM) while a task runs its batch, the worker leaves after that
    task: the other tasks' batches wait for their next owner, not for this turn's end."""
    armed: list[Worker] = []

    def stop_on_first(v: str) -> str:
        if armed:
            armed.pop().stop()
        return v

    b = StreamBuilder("st")
    b.source("in", queues=2).map(stop_on_first).sink("out")
    broker = open_broker(tmp_path)
    worker = Worker(b.build(), broker, tmp_path, member_id="w")
    worker.join(0.0)
    now = run_until_idle(worker, 0.0)  # owns both tasks, nothing to do
    for q in (0, 1):
        append(broker, "in", q, ["a", "b", "c"])
    armed.append(worker)
    processed = 0
    while not processed and not worker.stop_event.is_set():
        now += 0.01
        processed = worker.step(now)
    assert worker.stop_event.is_set()
    assert processed == 3  # one task's batch, not both
    assert sorted(t.lag() for t in worker.tasks.values()) == [0, 3]
    worker.leave()


def test_worker_config_validates() -> None:
    with pytest.raises(ValueError, match="rebalance_interval"):
        WorkerConfig(rebalance_interval=0.5)


def test_restore_progress_is_published_and_shown(tmp_path, monkeypatch, capsys) -> None:
    """A task restoring a large changelog reports progress; the worker publishes it for
    the supervisor; the progress line shows it; it is gone once the restore is done."""
    import itertools
    import time

    from rstreams.live import RunProgress
    from rstreams.runner import Progress
    from rstreams.runtime.engine.coordination.local import create_topics
    from rstreams.runtime.engine.coordination.worker import restore_dir, restore_progress
    from rstreams.runtime.engine.operators.context import EngineConfig
    from rstreams.runtime.engine.operators.producer import Producer
    from rstreams.runtime.engine.tasks.task import Task
    from rstreams.serde import INTERNAL_SERDE

    b = StreamBuilder("r")
    b.source("in", queues=1).keyBy(lambda v: v).count(name="c", queues=1).sink("out")
    topo = b.build()
    broker = open_broker(tmp_path)
    cfg = EngineConfig(state="rocksdb", state_dir=str(tmp_path / "state"))
    create_topics(topo, broker, cfg)
    n = 60_000
    for i in range(0, n, 10_000):
        rows = [(0, INTERNAL_SERDE.serialize(f"k{j}"), INTERNAL_SERDE.serialize(j), ())
                for j in range(i, i + 10_000)]  # fmt: skip
        broker.append("r-c-changelog", 0, rows)
    broker.flush()

    worker = Worker(topo, broker, tmp_path, member_id="w", engine=cfg)
    seen: list[tuple[int, int] | None] = []
    publish = worker._restore_progress

    def slow_publish(task: str, done: int, total: int) -> None:
        publish(task, done, total)
        seen.append(restore_progress(worker.membership.dir))

    # Report at every chunk of the restore (not twice a second) to see the middle.
    ticks = itertools.count()
    monkeypatch.setattr(time, "monotonic", lambda: float(next(ticks)))
    task = Task(topo, topo.subtopologies[1], 0, broker, Producer(broker), cfg, "r",
                lambda: 0, on_restore=slow_publish)  # fmt: skip
    assert task.restored == n
    assert seen[-1] is None  # done: nothing published any more
    middle = [s for s in seen if s is not None]
    assert middle and all(0 < d < t == n for d, t in middle)
    assert [d for d, _ in middle] == sorted(d for d, _ in middle)
    assert not list(restore_dir(worker.membership.dir).glob("*"))

    line = RunProgress(enabled=True, every=0.0)  # stderr is no terminal: a plain line
    line(Progress(10, 2, 5, 10, 1.0, restoring=(30_000, n)))
    assert "restoring state 50% (30,000/60,000)" in capsys.readouterr().err
    for s in task.stores.values():
        s.close(flush=False)
    broker.close()


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not msgpack
        # An earlier release's shape: rows instead of encoded frames.
        b"\x84\xa4task\xa30_0\xa3seq\x01\xa7offsets\x80\xa7appends\x91\x94\xa1t\x00\x00\x90",
    ],
)
def test_an_unreadable_transaction_stops_the_task_naming_the_record(tmp_path, payload) -> None:
    from rstreams import SerdeError
    from rstreams.runtime.engine.coordination.local import create_topics
    from rstreams.runtime.engine.operators.context import EngineConfig
    from rstreams.runtime.engine.operators.producer import Producer
    from rstreams.runtime.engine.tasks.task import Task, transactions_topic

    b = StreamBuilder("x")
    b.source("in", queues=1).keyBy(lambda v: v).count(name="c", queues=1).sink("out")
    topo = b.build()
    broker = open_broker(tmp_path)
    cfg = EngineConfig(guarantee="exactly-once")
    create_topics(topo, broker, cfg)
    broker.append(transactions_topic("x"), 0, [(0, None, payload, ())])
    with pytest.raises(SerdeError, match=r"unreadable transaction record at x-transactions\[0\]@0"):
        Task(topo, topo.subtopologies[0], 0, broker, Producer(broker), cfg, "x", lambda: 0,
             txn_queue=0)  # fmt: skip
    broker.close()
