"""A worker driven step by step in this process, over the real file log."""

from __future__ import annotations

import collections
import re

import pytest

import rstreams.runtime.engine.local as local
from rstreams import StreamBuilder
from rstreams.runtime.engine.worker import Worker, WorkerConfig, open_broker


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


def run_until_idle(worker: Worker) -> None:
    worker.membership.join()
    worker.rebalance()
    worker._claim_tasks()
    for _ in range(10_000):
        worker.pool.pull_all()
        moved = 0
        for t in worker.tasks.values():
            moved += t.poll(1000)
            worker.pool.wake(t.producer.flush())
        if not moved:
            worker.commit()
            worker.pool.pull_all()
            if not any(t.lag() for t in worker.tasks.values()):
                return
    raise AssertionError("the worker did not finish")


def test_maintenance_purges_shuffles_and_compacts_changelogs(tmp_path, monkeypatch, corpus_lines):
    monkeypatch.setattr(local, "INTERNAL_SEGMENT_BYTES", 2048)  # many small segments
    topology = wordcount()
    broker = open_broker(tmp_path)
    config = WorkerConfig(compact_min_records=0)
    worker = Worker(topology, broker, tmp_path, member_id="w", config=config)
    lines = corpus_lines[:3000]
    for i in range(0, len(lines), 100):  # many commits: many changelog updates per key
        chunk = [(0, None, line.encode(), ()) for line in lines[i : i + 100]]
        broker.append("lines", (i // 100) % 2, chunk)
        run_until_idle(worker)
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
    worker.pool.stop()
    for name in list(worker.tasks):
        worker._stop_task(name)
    worker.membership.leave()
    again = Worker(topology, open_broker(tmp_path), tmp_path, member_id="w2")
    again.membership.join()
    again.rebalance()
    again._claim_tasks()
    state: dict[str, int] = {}
    for task in again.tasks.values():
        if "wc-count-store" in task.stores:
            state.update(task.stores["wc-count-store"].items())
    again.pool.stop()
    assert state == dict(expected)


def test_worker_config_validates() -> None:
    with pytest.raises(ValueError, match="rebalance_interval"):
        WorkerConfig(rebalance_interval=0.5)


def test_restore_progress_is_published_and_shown(tmp_path, monkeypatch, capsys) -> None:
    """A task restoring a large changelog reports progress; the worker publishes it for
    the supervisor; the progress line shows it; it is gone once the restore is done."""
    import itertools
    import time

    from rstreams.cli import _ProgressLine
    from rstreams.runner import Progress
    from rstreams.runtime.engine.context import EngineConfig
    from rstreams.runtime.engine.local import create_topics
    from rstreams.runtime.engine.producer import Producer
    from rstreams.runtime.engine.task import Task
    from rstreams.runtime.engine.worker import restore_dir, restore_progress
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

    line = _ProgressLine(enabled=True)
    line(Progress(10, 2, 5, 10, 1.0, restoring=(30_000, n)))
    assert "restoring state  50% (30,000/60,000)" in capsys.readouterr().err
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
    from rstreams.runtime.engine.context import EngineConfig
    from rstreams.runtime.engine.local import create_topics
    from rstreams.runtime.engine.producer import Producer
    from rstreams.runtime.engine.task import Task, transactions_topic

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
