"""In-process engine: every task of a topology in one thread over one broker.

The test driver and ``rstreams run`` (in-process mode) both use it, so what the driver
checks is the same processor/shuffle/commit path the workers run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from rstreams.errors import ConfigError
from rstreams.planner.topology import Topology
from rstreams.runtime.engine.operators.context import EngineConfig, dead_letter_topic
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.engine.operators.record import wall_clock_ms
from rstreams.runtime.engine.tasks.task import (
    Task,
    commit_tasks,
    relieve_memory,
    transactions_topic,
)
from rstreams.runtime.engine.tasks.taskid import TaskId
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.queues.memory import MemoryBroker

#: Segment size of shuffle and changelog topics: small enough that purging consumed
#: shuffle records and compacting changelogs (both work on closed segments) keep up.
INTERNAL_SEGMENT_BYTES = 4 * 1024 * 1024


def create_topics(topology: Topology, broker: Broker, config: EngineConfig) -> dict[str, int]:
    """Create every topic of the topology, resolving unknown queue counts.

    A topic that already exists keeps its queue count (a declared count must match);
    changelogs get the queue count of the topic their store is split by.
    """
    counts: dict[str, int] = {}
    changelog_input = {s.changelog_topic: s.input_topic for s in topology.stores.values()}
    specs = sorted(topology.topics.values(), key=lambda t: t.role == "changelog")
    for spec in specs:
        existing = broker.queue_count(spec.name)
        if existing is not None and spec.queues is not None and existing != spec.queues:
            raise ConfigError(
                f"topic {spec.name!r} has {existing} queues but the topology declares {spec.queues}"
            )
        if spec.role == "changelog":
            n = counts[changelog_input[spec.name]]
        else:
            n = existing or spec.queues or config.default_queues
        options = {"segment_bytes": INTERNAL_SEGMENT_BYTES} if spec.internal else {}
        broker.create_topic(spec.name, n, compacted=spec.compacted, **options)
        counts[spec.name] = n
    if config.on_error == "dead-letter":
        broker.create_topic(dead_letter_topic(topology.job_id), 1)
    if config.guarantee == "exactly-once":
        n = len(task_index(topology, counts))
        broker.create_topic(
            transactions_topic(topology.job_id), n, segment_bytes=INTERNAL_SEGMENT_BYTES
        )
    return counts


def task_index(topology: Topology, counts: dict[str, int]) -> dict[TaskId, int]:
    """Every task id with its index: its transaction queue."""
    out: dict[TaskId, int] = {}
    for sub in topology.subtopologies:
        for q in range(max(counts[t] for t in sub.source_topics)):
            out[TaskId(sub.id, q)] = len(out)
    return out


class LocalEngine:
    """All tasks of ``topology`` (one per sub-topology per queue) in this process."""

    def __init__(
        self,
        topology: Topology,
        broker: Broker | None = None,
        config: EngineConfig | None = None,
        producer: Producer | None = None,
        group: str | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.topology = topology
        self.config = config or EngineConfig()
        self.broker: Broker = broker or MemoryBroker()
        self.producer = producer or Producer(self.broker)
        self.group = group or topology.job_id
        self.queue_counts = create_topics(topology, self.broker, self.config)
        self.tasks: list[Task] = []
        self.readers: dict[tuple[str, int], Task] = {}
        index = task_index(topology, self.queue_counts)
        eos = self.config.guarantee == "exactly-once"
        for sub in topology.subtopologies:
            n = max(self.queue_counts[t] for t in sub.source_topics)
            for q in range(n):
                # A transaction holds one task's output only: each needs its own producer.
                producer = Producer(self.broker) if eos else self.producer
                task = Task(
                    topology, sub, q, self.broker, producer, self.config, self.group, clock,
                    txn_queue=index[TaskId(sub.id, q)],
                )  # fmt: skip
                self.tasks.append(task)
                for t in task.sources:
                    self.readers[(t, q)] = task

    def run_until_idle(self, commit: bool = True) -> int:
        """Process until no task has input left; commits at the end (unless told not
        to: combined and coalesced updates then wait for a later commit). Returns
        records read."""
        total = 0
        while True:
            progress = 0
            for task in self.tasks:  # upstream sub-topologies first
                while n := task.poll(self.config.batch_size):
                    progress += n
                    self.producer.flush()
                    relieve_memory(self.tasks, self.config.cache_entries)
            if progress == 0:
                if not commit:
                    return total
                self.commit()  # may emit coalesced updates: loop until nothing moves
                if not any(t.lag() for t in self.tasks):
                    return total
            total += progress

    def end_of_input(self) -> None:
        """Bounded input is over: sub-topology by sub-topology (upstream first), let its
        tasks emit what waits for more input, and process what that causes downstream."""
        for sub in self.topology.subtopologies:
            for task in self.tasks:
                if task.sub is sub:
                    task.end_of_input()
            self.producer.flush()
            self.run_until_idle()

    def commit(self, tasks: Collection[Task] | None = None) -> None:
        """Commit every task, or only ``tasks`` (in the order of :attr:`tasks`)."""
        if tasks is None:
            commit_tasks(self.tasks, self.broker)
        else:
            commit_tasks([t for t in self.tasks if t in tasks], self.broker)

    def purge_consumed(self) -> None:
        """Drop records every reader has read past (in-memory runs stay bounded: they
        never read a record again)."""
        for (topic, q), task in self.readers.items():
            self.broker.purge(topic, q, task.positions[topic])

    def close(self) -> None:
        for task in self.tasks:
            task.close()

    def metrics(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for task in self.tasks:
            for k, v in task.ctx.metrics.items():
                out[k] = out.get(k, 0) + v
        return out
