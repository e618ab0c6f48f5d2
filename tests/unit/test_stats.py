"""The live statistics files: what workers and the supervisor publish, and the reader."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rstreams import StreamBuilder, TumblingWindow
from rstreams.planner.topology import Topology
from rstreams.runtime.engine.coordination.local import LocalEngine
from rstreams.runtime.engine.coordination.stats import (
    CommitHistogram,
    StatsPublisher,
    SupervisorStats,
    read_stats,
    stats_dir,
)
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.tasks.task import Task
from rstreams.runtime.queues.memory import MemoryBroker

LINES = ["a b a", "c a", "b", "d d d d"]
WORDS = [w for line in LINES for w in line.split()]


def word_count(fail_on: str | None = None) -> Topology:
    def split(line: str) -> list[str]:
        if fail_on is not None and line == fail_on:
            raise ValueError("bad line")
        return line.split()

    b = StreamBuilder("wc")
    (
        b.source("lines")
        .flatMap(split, name="split")
        .keyBy(lambda w: w, name="by-word")
        .count(name="counts", queues=2)
        .toRStream()
        .sink("out", name="out")
    )
    return b.build()


def run(engine: LocalEngine, lines: list[str]) -> None:
    engine.producer.send_many("lines", 0, [(0, None, s.encode(), ()) for s in lines])
    engine.producer.flush()
    engine.run_until_idle()


def tasks_of(engine: LocalEngine) -> dict[str, Task]:
    return {t.id: t for t in engine.tasks}


@pytest.fixture
def coord(tmp_path: Path) -> Path:
    return tmp_path / "coordination" / "wc"


def test_steps_queues_and_stores_are_counted(coord: Path) -> None:
    engine = LocalEngine(word_count(), config=EngineConfig())
    run(engine, LINES)
    pub = StatsPublisher(coord, "w0-1", capture_errors=False)
    doc = pub.snapshot(tasks_of(engine), engine.broker, processed=7, generation=3)
    steps = doc["steps"]
    assert steps["source-lines"] == {"in": len(LINES), "out": len(LINES)}
    assert steps["split"] == {"in": len(LINES), "out": len(WORDS)}
    assert steps["by-word"] == {"in": len(WORDS), "out": len(WORDS)}
    # The shuffle sink combines the counts of a commit interval: one record per word.
    assert steps["counts-shuffle-sink"] == {"in": len(WORDS), "out": len(set(WORDS))}
    assert steps["out"]["in"] == steps["out"]["out"] == len(set(WORDS))
    assert doc["tasks"]["0_0"]["queues"] == {
        "lines[0]": {"position": len(LINES), "end": len(LINES), "lag": 0}
    }
    shuffle_ends = [
        doc["tasks"][f"1_{q}"]["queues"][f"wc-counts-shuffle[{q}]"]["end"] for q in (0, 1)
    ]
    assert sum(shuffle_ends) == len(set(WORDS))
    entries = sum(s["entries"] for name, s in doc["stores"].items() if name.startswith("wc-counts"))
    assert entries == len(set(WORDS))
    assert (doc["processed"], doc["generation"], doc["member"]) == (7, 3, "w0-1")


def test_lag_shows_input_not_processed_yet(coord: Path) -> None:
    engine = LocalEngine(word_count(), config=EngineConfig())
    engine.producer.send_many("lines", 0, [(0, None, b"x y", ())] * 5)
    engine.producer.flush()
    pub = StatsPublisher(coord, "w", capture_errors=False)
    doc = pub.snapshot(tasks_of(engine), engine.broker, processed=0, generation=0)
    assert doc["tasks"]["0_0"]["queues"]["lines[0]"] == {"position": 0, "end": 5, "lag": 5}


def test_counts_of_tasks_given_up_are_kept(coord: Path) -> None:
    engine = LocalEngine(word_count(), config=EngineConfig())
    run(engine, LINES)
    pub = StatsPublisher(coord, "w", capture_errors=False)
    tasks = tasks_of(engine)
    before = pub.snapshot(tasks, engine.broker, processed=0, generation=0)
    # The worker gives every task up; a new owner's task object for 0_0 starts at zero.
    after = pub.snapshot({}, engine.broker, processed=0, generation=1)
    assert after["steps"] == before["steps"] and after["tasks"] == {}
    fresh = LocalEngine(word_count(), config=EngineConfig())
    run(fresh, ["e"])
    again = pub.snapshot(tasks_of(fresh), fresh.broker, processed=0, generation=2)
    assert again["steps"]["split"] == {"in": len(LINES) + 1, "out": len(WORDS) + 1}


def test_skipped_and_dead_lettered_records_and_their_warnings(coord: Path) -> None:
    engine = LocalEngine(word_count(fail_on="c a"), config=EngineConfig(on_error="dead-letter"))
    pub = StatsPublisher(coord, "w")
    logging.getLogger("rstreams.task").warning("before the first publication")
    try:
        pub.publish({}, engine.broker, processed=0, generation=0)  # listens from here on
        run(engine, LINES)
        doc = pub.snapshot(tasks_of(engine), engine.broker, processed=0, generation=0)
    finally:
        pub.close()
    assert (doc["skipped"], doc["dead_lettered"]) == (1, 1)
    assert doc["steps"]["split"] == {"in": len(LINES), "out": len(WORDS) - 2}
    (error,) = doc["errors"]
    assert "step 'split' failed" in error["message"] and "bad line" in error["message"]
    # Closed: no longer listening to the log.
    logging.getLogger("rstreams.task").warning("after close")
    assert "after close" not in str(pub.snapshot({}, engine.broker, processed=0, generation=0))


def test_publish_writes_at_most_once_per_interval_and_close_removes_the_file(
    coord: Path,
) -> None:
    engine = LocalEngine(word_count(), config=EngineConfig())
    pub = StatsPublisher(coord, "w0-1", interval=60, capture_errors=False)
    assert pub.publish(tasks_of(engine), engine.broker, processed=1, generation=0)
    assert not pub.publish(tasks_of(engine), engine.broker, processed=2, generation=0)
    (worker,) = read_stats(coord).workers
    assert (worker["member"], worker["processed"], worker["pid"]) == ("w0-1", 1, os.getpid())
    pub.commit_took(0.02)
    assert pub.publish(tasks_of(engine), engine.broker, processed=2, generation=0, force=True)
    (worker,) = read_stats(coord).workers
    assert worker["commits"]["count"] == 1 and worker["commits"]["buckets"][2] == [0.025, 1]
    pub.close()
    assert read_stats(coord).workers == []
    assert not (stats_dir(coord) / "worker-w0-1.json").exists()


def test_restore_progress_is_published_while_the_loop_waits(coord: Path) -> None:
    engine = LocalEngine(word_count(), config=EngineConfig())
    pub = StatsPublisher(coord, "w", interval=0, capture_errors=False)
    pub.publish({}, engine.broker, processed=0, generation=0)
    pub.restore_progress("1_0", 250, 1000)
    (worker,) = read_stats(coord).workers
    assert worker["tasks"]["1_0"]["restoring"] == [250, 1000]
    pub.restore_progress("1_0", 1000, 1000)
    doc = pub.snapshot(tasks_of(engine), engine.broker, processed=0, generation=0)
    assert doc["tasks"]["1_0"]["restoring"] is None


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_half_written_files_and_files_of_dead_processes_are_skipped(coord: Path) -> None:
    d = stats_dir(coord)
    d.mkdir(parents=True)
    alive = {"version": 1, "member": "a", "pid": os.getpid(), "time": 0.0}
    (d / "worker-a.json").write_text(json.dumps(alive))
    (d / "worker-b.json").write_text(json.dumps({**alive, "member": "b"})[:25])
    (d / "worker-c.json").write_text(json.dumps({**alive, "member": "c", "pid": _dead_pid()}))
    (d / "worker-d.json").write_text(json.dumps({**alive, "member": "d", "version": 99}))
    (d / "worker-e.json").write_text(json.dumps({**alive, "member": "e", "pid": 0}))
    assert [w["member"] for w in read_stats(coord).workers] == ["a"]
    # The supervisor deletes the files of workers that died.
    sup = SupervisorStats(coord, job="wc", pipeline="wc.py", workers_wanted=1)
    sup.publish({}, {0: os.getpid()})
    assert not (d / "worker-c.json").exists() and not (d / "worker-e.json").exists()
    assert (d / "worker-a.json").exists()


def test_supervisor_file_restarts_and_final_state(coord: Path) -> None:
    sup = SupervisorStats(coord, job="wc", pipeline="wc.py", workers_wanted=2)
    sup.spawned(0)
    sup.spawned(1)
    sup.spawned(1)
    sup.publish(
        {"records_in": 5, "records_out": 3, "lag": 2, "bytes_read": 10, "bytes_total": 20},
        {0: os.getpid(), 1: None},
    )
    s = read_stats(coord)
    assert s.running and s.supervisor is not None
    assert s.supervisor["workers"] == [
        {"slot": 0, "pid": os.getpid(), "alive": True, "restarts": 0},
        {"slot": 1, "pid": 0, "alive": False, "restarts": 1},
    ]
    assert (s.supervisor["restarts"], s.supervisor["records_in"], s.supervisor["lag"]) == (1, 5, 2)
    sup.publish(None, {}, state="done")  # the counts published last stay
    final = read_stats(coord).supervisor
    assert final is not None and (final["state"], final["records_in"]) == ("done", 5)


def test_a_supervisor_that_died_running_is_not_reported(coord: Path) -> None:
    sup = SupervisorStats(coord, job="wc", pipeline="wc.py", workers_wanted=1)
    sup.publish({}, {})
    path = stats_dir(coord) / "supervisor.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "pid": _dead_pid()}))
    assert read_stats(coord).supervisor is None
    path.write_text(json.dumps({**doc, "pid": _dead_pid(), "state": "failed"}))
    s = read_stats(coord)
    assert not s.running and s.supervisor is not None and s.supervisor["state"] == "failed"


def test_commit_histogram_buckets_are_cumulative() -> None:
    h = CommitHistogram((0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 2.0):
        h.observe(seconds)
    assert h.to_json() == {
        "count": 4,
        "seconds_sum": pytest.approx(2.65),
        "buckets": [[0.1, 2], [1.0, 3], ["+Inf", 4]],
    }


def test_rocksdb_stores_report_their_estimates_and_restored_records(
    coord: Path, tmp_path: Path
) -> None:
    broker = MemoryBroker()
    config = EngineConfig(state="rocksdb", state_dir=str(tmp_path / "state-a"))
    engine = LocalEngine(word_count(), broker, config)
    run(engine, LINES)
    pub = StatsPublisher(coord, "w", capture_errors=False)
    doc = pub.snapshot(tasks_of(engine), broker, processed=0, generation=0)
    stores = [s for name, s in doc["stores"].items() if name.startswith("wc-counts")]
    assert sum(s["entries"] for s in stores) == len(set(WORDS))
    assert all(s["bytes"] > 0 for s in stores)
    assert doc["restored_records"] == 0
    engine.close()
    # Another process, without the local state: its tasks restore from the changelogs.
    config = EngineConfig(state="rocksdb", state_dir=str(tmp_path / "state-b"))
    again = LocalEngine(word_count(), broker, config)
    try:
        doc = pub.snapshot(tasks_of(again), broker, processed=0, generation=1)
    finally:
        again.close()
    stores = [s for name, s in doc["stores"].items() if name.startswith("wc-counts")]
    assert sum(s["restored"] for s in stores) == doc["restored_records"] == len(set(WORDS))
    assert sum(s["entries"] for s in stores) == len(set(WORDS))


def test_late_records_are_counted(coord: Path) -> None:
    b = StreamBuilder("late")
    (
        b.source("in", queues=1)
        .selectTimestamp(lambda v: int(v.split()[1]))
        .keyBy(lambda v: v.split()[0])
        .window(TumblingWindow(100, grace=0))
        .count(name="agg", queues=1)
        .toRStream()
        .sink("out")
    )
    engine = LocalEngine(b.build(), config=EngineConfig())
    for batch in (["a 10", "a 300"], ["b 20", "c 150", "a 310"]):
        engine.producer.send_many("in", 0, [(0, None, v.encode(), ()) for v in batch])
        engine.producer.flush()
        engine.run_until_idle()
    # Stream time got to 300 first: [0, 100) and [100, 200) were closed for b and c.
    doc = StatsPublisher(coord, "w", capture_errors=False).snapshot(
        tasks_of(engine), engine.broker, processed=0, generation=0
    )
    assert doc["late"] == 2
