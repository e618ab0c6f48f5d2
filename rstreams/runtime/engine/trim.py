"""Dropping the records of the job's own topics that every reader committed past.

On the file log, a worker's maintenance (every ``maintenance_interval``) purges the
shuffle queues of its tasks up to their committed positions: the job's own group is
their only reader. A broker that holds its records in memory (Redis: its class says
``trims_after_commit``) does this after every commit instead, and for the job's source
topics too, so that the server holds what is not consumed yet rather than the whole
input. A source queue keeps its last record, whose header says how far the ingest read
its input (what a later run, or a resync, goes on from: see the ingest module), and
nothing that another group reading the topic (``rstreams consume --group``) has not
committed past. Sink topics are never purged here (``consume --from-beginning`` and
the egress to external streams read them; retention options bound them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rstreams.planner.topology import Topology
    from rstreams.runtime.engine.task import Task
    from rstreams.runtime.queues.broker import Broker

__all__ = ["purge_consumed", "records_held", "trims_after_commit"]


def trims_after_commit(broker: Broker) -> bool:
    """Whether ``broker`` wants consumed records dropped after every commit (it holds
    them in memory), sources included."""
    return bool(getattr(broker, "trims_after_commit", False))


def purge_consumed(
    broker: Broker, topology: Topology, tasks: Iterable[Task], *, sources: bool
) -> int:
    """Purge each task's shuffle queues (and, with ``sources``, its source queues) up to
    what it committed; the number of queues purged."""
    topics = topology.topics
    others: list[dict[tuple[str, int], int]] | None = None
    purged = 0
    for task in tasks:
        q = task.queue
        for topic, pos in task.committed.items():
            role = topics[topic].role if topic in topics else None
            if role == "source" and sources:
                if others is None:
                    others = _other_readers(broker, topology.job_id)
                held = [o[(topic, q)] for o in others if (topic, q) in o]
                # (the last record holds the ingest's mark)
                pos = min(pos, broker.end_offset(topic, q) - 1, *held)
            elif role != "shuffle":
                continue
            if pos > 0:
                broker.purge(topic, q, pos)
                purged += 1
    return purged


def _other_readers(broker: Broker, job_id: str) -> list[dict[tuple[str, int], int]]:
    """The committed offsets of every group but the job's own and its bookkeeping groups
    (``<job>.ingest-end``, ...: offsets that are no reader's position)."""
    return [
        broker.group_offsets(g)
        for g in broker.groups()
        if g != job_id and not g.startswith(job_id + ".")
    ]


def records_held(broker: Broker, topic: str, queue: int) -> int:
    """Records a queue holds: what the broker says (Redis: compaction keeps offsets, so
    a compacted queue holds fewer than its end minus its start), else that difference."""
    held = getattr(broker, "records_held", None)
    if held is not None:
        return int(held(topic, queue))
    return broker.end_offset(topic, queue) - broker.start_offset(topic, queue)
