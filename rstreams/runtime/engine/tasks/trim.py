"""Dropping the records of the job's own topics that their readers committed past.

On the file log, a worker's maintenance (every ``maintenance_interval``) purges the
shuffle queues of its tasks up to their committed positions: the job's own group is
their only reader. A broker that holds its records in memory (Redis: its class says
``trims_after_commit``) has them purged after every commit instead, and its changelogs
checked for compaction then too. Its source topics are trimmed by the ingest, before it
appends to a queue that holds its bound (:func:`trim_source`, called from
:meth:`~rstreams.runtime.engine.io.ingest.Ingest.step`): a source queue keeps its last
record, whose header says how far the ingest read its input (what a later run, or a
resync, goes on from), and what another group reading the topic (``rstreams consume
--group``) has not committed. Sink topics are never purged here (``consume
--from-beginning``, the run's table and the egress to external streams read them;
retention options bound them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sized
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rstreams.planner.topology import Topology
    from rstreams.runtime.engine.tasks.task import Task
    from rstreams.runtime.queues.broker import Broker

__all__ = [
    "CompactionCheck",
    "purge_consumed",
    "records_held",
    "trim_source",
    "trims_after_commit",
]


def trims_after_commit(broker: Broker) -> bool:
    """Whether ``broker`` wants consumed records dropped after every commit (it holds
    them in memory), sources included."""
    return bool(getattr(broker, "trims_after_commit", False))


def purge_consumed(broker: Broker, topology: Topology, tasks: Iterable[Task]) -> int:
    """Purge each task's shuffle queues up to what it committed; the queues purged."""
    topics = topology.topics
    purged = 0
    for task in tasks:
        for topic, pos in task.committed.items():
            if topic in topics and topics[topic].role == "shuffle" and pos > 0:
                broker.purge(topic, task.queue, pos)
                purged += 1
    return purged


def trim_source(
    broker: Broker, job_id: str, topic: str, queue: int, committed: int, end: int
) -> int:
    """Purge a source queue that ends at ``end`` up to ``committed`` (the job's group's
    position), but not its last record (the ingest's mark) nor what another group reading
    the topic has not committed; the queue's start after it."""
    held = [o[(topic, queue)] for o in _other_readers(broker, job_id) if (topic, queue) in o]
    before = min(committed, end - 1, *held)
    start = broker.start_offset(topic, queue)
    if before > start:
        broker.purge(topic, queue, before)
        return before
    return start


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


class CompactionCheck:
    """Whether a changelog queue is due for compaction: it holds more than twice its
    store's keys plus ``min_records`` records.

    Counting a store's keys scans it (RocksDB), and on Redis the check runs after every
    commit: a quarter of a worker's time on a store of many keys. So the keys are counted
    only when the queue could be due. Each record appended to the changelog since the
    last count changed the store by at most one key, so the store holds at least the
    keys counted then minus the records appended since; while the queue holds no more
    than twice that plus ``min_records``, it is not due, as a count would say.

    >>> check, store = CompactionCheck(min_records=10), set(range(40))
    >>> check.due("log", 0, store, 50)  # counted: 50 <= 2 x 40 + 10
    False
    >>> check.due("log", 0, store, 60)  # 10 records later, at least 30 keys: not counted
    False
    >>> store -= set(range(21))  # 21 records since the count deleted 21 keys
    >>> check.due("log", 0, store, 71)  # at least 19 keys: could be due, counted, and is
    True
    """

    def __init__(self, min_records: int) -> None:
        self.min_records = min_records
        #: Per (changelog, queue): the store counted, its keys then, the records then.
        self._counted: dict[tuple[str, int], tuple[Sized, int, int]] = {}

    def due(self, topic: str, queue: int, store: Sized, records: int) -> bool:
        """Whether queue ``queue`` of changelog ``topic``, holding ``records``, is due
        (``store``: its store, counted with len() only when needed)."""
        if records <= self.min_records:
            return False
        seen = self._counted.get((topic, queue))
        if seen is not None and seen[0] is store and records >= seen[2]:
            at_least = seen[1] - (records - seen[2])
            if records <= 2 * at_least + self.min_records:
                return False
        keys = len(store)
        self._counted[(topic, queue)] = (store, keys, records)
        return records > 2 * keys + self.min_records

    def forget(self, topic: str, queue: int) -> None:
        """The queue was compacted: count again next time."""
        self._counted.pop((topic, queue), None)

    def forget_all(self, topics: Iterable[str], queue: int) -> None:
        """A task that left: its changelogs' queues (and stores) are not checked here."""
        for topic in topics:
            self.forget(topic, queue)
