"""EndOfInput: when a bounded run's group has committed all its input, and end of input
declared to one sub-topology after the other (upstream first), on a real file log."""

from __future__ import annotations

from pathlib import Path

from rstreams import StreamBuilder
from rstreams.runtime.engine.coordination.local import create_topics
from rstreams.runtime.engine.coordination.worker import open_broker
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.tasks.endofinput import EndOfInput
from rstreams.runtime.engine.tasks.taskid import TaskId
from rstreams.runtime.layout import JobLayout


def test_lag_then_end_of_input_one_subtopology_after_the_other(tmp_path: Path) -> None:
    b = StreamBuilder("wc")
    b.source("lines", queues=2).keyBy(lambda w: w).count(queues=1).sink("counts")
    topology = b.build()
    broker = open_broker(tmp_path)
    counts = create_topics(topology, broker, EngineConfig())
    group = JobLayout(tmp_path, "wc").coordination
    eoi = EndOfInput(broker, topology, counts, group)
    try:
        assert eoi.lag() == 0 and eoi.committed_all()
        broker.append("lines", 0, [(0, None, b"a", ()), (0, None, b"b", ())])
        broker.append("lines", 1, [(0, None, b"c", ())])
        assert eoi.lag() == 3 and not eoi.committed_all() and not eoi.over()
        assert not group.eoi.exists()  # nothing declared while input is uncommitted
        broker.commit("wc", "lines", 0, 2)
        assert eoi.lag() == 1
        broker.commit("wc", "lines", 1, 1)
        assert eoi.lag() == 0 and eoi.committed_all()

        first, second = (sub.id for sub in topology.subtopologies)
        assert not eoi.over()  # declared to the first sub-topology
        assert group.eoi_declared(first).exists() and not group.eoi_declared(second).exists()
        assert not eoi.over()  # its tasks are not done yet
        group.eoi_done(TaskId(first, 0)).touch()
        assert not eoi.over()
        group.eoi_done(TaskId(first, 1)).touch()
        assert not eoi.over()  # declared to the second
        assert group.eoi_declared(second).exists()
        group.eoi_done(TaskId(second, 0)).touch()
        assert eoi.over()

        eoi.reset()  # a new run declares afresh
        assert not group.eoi.exists()
    finally:
        broker.close()
