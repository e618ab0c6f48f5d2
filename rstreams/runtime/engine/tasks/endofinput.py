"""End of input of a bounded durable run: when everything is processed, and declaring it.

A bounded run is over when everything is ingested, every input queue of every
sub-topology is committed up to its end, and end of input was declared to every
sub-topology in turn. Upstream first: once a sub-topology has committed all its input,
everything it will ever write downstream is already in the log (it flushes before
committing). Declaring end of input to a sub-topology (a control file, see
:class:`~rstreams.runtime.layout.GroupLayout`) makes each of its tasks finish (close
its windows...), commit and say so; what that emits downstream is processed before the
next sub-topology is told.
"""

from __future__ import annotations

import attrs

from rstreams.planner.topology import Topology
from rstreams.runtime.engine.tasks.taskid import TaskId
from rstreams.runtime.layout import GroupLayout
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.queues.eoiflags import EoiFlags, FileEoiFlags


@attrs.frozen
class EndOfInput:
    """Tells when the job's group has committed all its input, and declares end of input
    one sub-topology at a time (the supervisor's side; workers answer in
    ``Worker._end_of_input``). ``queue_counts``: of every topic of ``topology``;
    ``flags``: where declarations and answers are kept (default: files of ``group``)."""

    broker: Broker
    topology: Topology
    queue_counts: dict[str, int]
    group: GroupLayout
    flags: EoiFlags = attrs.field(
        default=attrs.Factory(lambda self: FileEoiFlags(self.group), takes_self=True)
    )

    def reset(self) -> None:
        """A new bounded run: end of input is declared afresh when its input is done."""
        self.flags.reset()

    def _queues(self) -> list[tuple[str, int]]:
        """Every input queue of every sub-topology, upstream first."""
        return [
            (topic, q)
            for sub in self.topology.subtopologies
            for topic in sub.source_topics
            for q in range(self.queue_counts[topic])
        ]

    def _uncommitted(self) -> list[int]:
        """Per input queue, records not committed yet (two broker calls in all)."""
        queues = self._queues()
        committed = self.broker.group_offsets(self.topology.job_id)
        ends = self.broker.end_offsets(queues)
        return [end - committed.get(q, 0) for q, end in zip(queues, ends, strict=True)]

    def lag(self) -> int:
        """Records not yet committed, over every input queue of every sub-topology."""
        return sum(self._uncommitted())

    def waiting(self) -> int:
        """Records not yet committed, over the queues that have some (0 exactly when
        :meth:`committed_all`)."""
        return sum(n for n in self._uncommitted() if n > 0)

    def committed_all(self) -> bool:
        """Is every input queue of every sub-topology committed up to its end?"""
        return all(n <= 0 for n in self._uncommitted())

    def declare_step(self) -> bool:
        """Declare end of input to the next sub-topology (upstream first) once the
        previous one's tasks all finished and their output is processed. True when all
        are done."""
        flags = self.flags
        for sub in self.topology.subtopologies:
            n = max(self.queue_counts[t] for t in sub.source_topics)
            if not flags.declared(sub.id):
                flags.declare(sub.id)
                return False
            if not all(flags.done(TaskId(sub.id, q)) for q in range(n)):
                return False
        return True

    def over(self) -> bool:
        """All input committed and end of input declared to, and done by, every
        sub-topology in turn (call only once everything is ingested)."""
        return self.committed_all() and self.declare_step()
