"""Collector: the final tables, the skip counts and the output size of a durable job,
read from its log and files after a real worker processed its input."""

from __future__ import annotations

from pathlib import Path

from rstreams import StreamBuilder
from rstreams.runtime.engine.coordination.collect import FOLD_CHUNK, Collector, publish_stats
from rstreams.runtime.engine.coordination.stats import SupervisorStats, read_stats
from rstreams.runtime.engine.coordination.worker import Worker, open_broker
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.tasks.endofinput import EndOfInput
from rstreams.runtime.layout import JobLayout


def test_tables_skip_counts_and_records_out(tmp_path: Path) -> None:
    b = StreamBuilder("ints")
    b.source("in", queues=2).map(int).keyBy(lambda n: n % 2).count(queues=1).sink("parity")
    topology = b.build()
    broker = open_broker(tmp_path)
    worker = Worker(topology, broker, tmp_path, member_id="w", engine=EngineConfig(on_error="skip"))
    group = JobLayout(tmp_path, "ints").coordination
    collect = Collector(broker, topology, worker.queue_counts, group)
    try:
        assert collect.tables() == {"parity": {}} and collect.skipped() == 0
        broker.append("in", 0, [(0, None, v, ()) for v in (b"1", b"x", b"2")])
        broker.append("in", 1, [(0, None, v, ()) for v in (b"3", b"y", b"z")])
        worker.join(0.0)
        committed = EndOfInput(broker, topology, worker.queue_counts, group).committed_all
        turns = iter(range(1, 20_000))
        while not committed():  # (StopIteration: the worker never got there)
            worker.step(next(turns) * 0.05)
        assert collect.tables() == {"parity": {0: 1, 1: 2}}
        assert collect.skipped() == 3  # over both tasks that skipped
        assert collect.records_out() >= 2  # (updates of a key may be coalesced)
        assert collect.restoring() is None
    finally:
        worker.leave()
        broker.close()


def test_stats_of_a_failed_run_are_published_with_what_can_be_read(tmp_path: Path) -> None:
    coord = JobLayout(tmp_path, "wc").coordination
    stats = SupervisorStats(coord.dir, job="wc", pipeline="wc.py", workers_wanted=1)
    publish_stats(stats, lambda: {"records_in": 5}, {0: None})
    assert read_stats(coord.dir).supervisor["records_in"] == 5  # type: ignore[index]

    def failing() -> dict[str, int]:
        raise OSError("the log is gone")

    publish_stats(stats, failing, {0: None}, "failed")
    doc = read_stats(coord.dir).supervisor
    assert doc is not None and doc["state"] == "failed" and doc["records_in"] == 5


def test_tables_fold_a_sink_topic_longer_than_a_chunk(tmp_path: Path) -> None:
    """The sink topics are read FOLD_CHUNK records at a time (the supervisor's memory stays
    flat as the input grows): a key's last value wins across chunk boundaries."""
    b = StreamBuilder("many")
    b.source("in", queues=1).sink("out", queues=1)
    topology = b.build()
    broker = open_broker(tmp_path)
    try:
        broker.create_topic("out", 1)
        n = 2 * FOLD_CHUNK + 7  # three chunks, the last one short
        keys = [str(i % 1000).encode() for i in range(n)]
        values = [str(i).encode() for i in range(n)]
        broker.append_columns("out", 0, [0] * n, keys, values, [()] * n)
        group = JobLayout(tmp_path, "many").coordination
        table = Collector(broker, topology, {"in": 1, "out": 1}, group).tables()["out"]
        expected: dict[int, int] = {}
        for i in range(n):
            expected[i % 1000] = i
        assert table == expected
    finally:
        broker.close()
