"""What a durable run gives back, read from the job's log and files: the final table of
every sink topic, the records the job skipped, and the run's statistics."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from rstreams.planner.topology import Topology
from rstreams.runtime.engine.coordination.stats import SupervisorStats
from rstreams.runtime.engine.coordination.worker import restore_progress, skipped_at
from rstreams.runtime.engine.tasks.lifecycle import SupervisorState
from rstreams.runtime.engine.tasks.taskid import TaskId
from rstreams.runtime.layout import GroupLayout
from rstreams.runtime.queues.broker import Broker

log = logging.getLogger("rstreams.supervisor")

#: Sink records read (and folded) at a time: the supervisor's memory at the end of a run
#: is the final tables plus one such chunk, whatever the input's size (the sink topics
#: grow with it: every commit writes the keys it changed).
FOLD_CHUNK = 10_000


@attrs.frozen
class Collector:
    """Reads what the job's workers committed: sink tables, skip counts, output size.
    ``queue_counts``: of every topic of ``topology``."""

    broker: Broker
    topology: Topology
    queue_counts: dict[str, int]
    group: GroupLayout

    def tables(self) -> dict[str, dict[Any, Any]]:
        """Final table (last value per key) of every sink topic, read from the log."""
        from rstreams.runtime.results import fold_records

        out: dict[str, dict[Any, Any]] = {}
        for topic in self.topology.sink_topics:
            spec = self.topology.topics[topic]
            table: dict[Any, Any] = {}
            for q in range(self.queue_counts[topic]):
                pos = self.broker.start_offset(topic, q)
                while True:
                    records = self.broker.read_columns(topic, q, pos, FOLD_CHUNK)
                    if not len(records):
                        break
                    fold_records(table, records, spec)
                    pos = records.last_offset + 1
            out[topic] = table
        return out

    def skipped(self) -> int:
        """Records the job skipped (``--on-error skip`` or ``dead-letter``) in the work it
        committed, over all its runs: what workers counted per task at each commit."""
        group = self.topology.job_id
        total = 0
        for sub in self.topology.subtopologies:
            n = max(self.queue_counts[t] for t in sub.source_topics)
            for q in range(n):
                committed = {
                    t: self.broker.committed(group, t, q)
                    for t in sub.source_topics
                    if q < self.queue_counts[t]
                }
                total += skipped_at(self.group.dir, TaskId(sub.id, q), committed)
        return total

    def records_out(self) -> int:
        """Records in the sink topics (one call: on Redis, one round trip)."""
        return sum(
            self.broker.end_offsets(
                (t, q) for t in self.topology.sink_topics for q in range(self.queue_counts[t])
            )
        )

    def restoring(self) -> tuple[int, int] | None:
        """(offsets replayed, offsets to replay) over the tasks restoring their state now."""
        return restore_progress(self.group.dir)


def publish_stats(
    stats: SupervisorStats,
    status: Callable[[], Mapping[str, Any]],
    pids: dict[int, int | None],
    state: SupervisorState = SupervisorState.RUNNING,
) -> None:
    """Publish the run's statistics (``supervisor.json``). Counts that can not be read
    leave those published last (a failing run: its own error is the one to report), and
    a last file that can not be written (a full disk) is only warned about."""
    try:
        now: Mapping[str, Any] | None = status()
    except Exception:
        now = None
    try:
        stats.publish(now, pids, state)
    except OSError as e:
        if state != SupervisorState.FAILED:
            raise
        log.warning("could not publish the run's final statistics: %s", e)
