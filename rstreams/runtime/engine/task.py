"""A task: the processor chain of one sub-topology for one queue, plus its state."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rstreams.planner.topology import SubTopology, Topology
from rstreams.runtime.engine.context import EngineConfig, StreamContext
from rstreams.runtime.engine.processors import Processor, SourceProcessor
from rstreams.runtime.engine.producer import Producer
from rstreams.runtime.queues.base import LogRecord
from rstreams.runtime.queues.memory import MemoryBroker
from rstreams.serde import INTERNAL_SERDE
from rstreams.state.cache import CachedStore
from rstreams.state.stores import MemoryStore

Fetch = Callable[[str, int, int, int], list[LogRecord]]


class Task:
    """Runs sub-topology ``sub`` on queue ``queue`` of every topic it reads.

    Built in phase 3: fresh processors from the factories, fresh stores for this queue.
    A commit flushes processors (parents first), then state (to stores and changelogs),
    then the producer, then records the consumed offsets.
    """

    def __init__(
        self,
        topology: Topology,
        sub: SubTopology,
        queue: int,
        broker: MemoryBroker,
        producer: Producer,
        config: EngineConfig,
        group: str,
        clock: Callable[[], int],
        fetch: Fetch | None = None,
    ) -> None:
        self.id = f"{sub.id}_{queue}"
        self.sub = sub
        self.queue = queue
        self.broker = broker
        self.producer = producer
        self.group = group
        procs = sub.build()
        self.processors: list[Processor] = [procs[f.name] for f in sub.factories]
        self.sources: dict[str, SourceProcessor] = {}
        for f in sub.factories:
            p = procs[f.name]
            if isinstance(p, SourceProcessor):
                qc = broker.queue_count(p.topic)
                if qc is not None and queue < qc:
                    self.sources[p.topic] = p
        self.stores: dict[str, CachedStore] = {}
        for name in sub.stores:
            spec = topology.stores[name]
            self.stores[name] = CachedStore(
                MemoryStore(name),
                INTERNAL_SERDE,
                spec.serde,
                changelog=self._changelog_writer(spec.changelog_topic, clock),
                max_entries=config.cache_entries,
            )
        self.changelogs = {name: topology.stores[name].changelog_topic for name in self.stores}
        self.ctx = StreamContext(topology.job_id, self.id, queue, producer, self.stores, config)
        for p in self.processors:
            p.init(self.ctx)
        self.positions = {t: broker.committed(group, t, queue) for t in self.sources}
        self.committed = dict(self.positions)
        self.fetch: Fetch = fetch or broker.read
        #: Set when processing raised: nothing of this task is committed after that, so
        #: the failed record (and everything after it) is read again on restart.
        self.failed = False
        self.restored = self.restore()

    def restore(self) -> int:
        """Rebuild this queue's state from the changelogs (latest value per key wins,
        tombstones delete); returns the number of changelog records replayed."""
        n = 0
        for name, topic in self.changelogs.items():
            inner = self.stores[name].inner
            pos = self.broker.start_offset(topic, self.queue)
            end = self.broker.end_offset(topic, self.queue)
            while pos < end:
                records = self.broker.read(topic, self.queue, pos, 10_000)
                if not records:
                    break
                inner.write_batch([(r.key, r.value) for r in records if r.key is not None])
                n += len(records)
                pos = records[-1].offset + 1
        return n

    def _changelog_writer(
        self, topic: str, clock: Callable[[], int]
    ) -> Callable[[Sequence[tuple[bytes, bytes | None]]], None]:
        def write(batch: Sequence[tuple[bytes, bytes | None]]) -> None:
            ts = clock()
            self.producer.send_many(topic, self.queue, [(ts, k, v, ()) for k, v in batch])

        return write

    def lag(self) -> int:
        return sum(self.broker.end_offset(t, self.queue) - pos for t, pos in self.positions.items())

    def poll(self, max_records: int) -> int:
        """Process up to ``max_records`` new records of each input queue."""
        n = 0
        for topic, pos in self.positions.items():
            records = self.fetch(topic, self.queue, pos, max_records)
            if records:
                self.positions[topic] = records[-1].offset + 1
                self._process(topic, records)
                n += len(records)
        return n

    def _process(self, topic: str, records: list[LogRecord]) -> None:
        try:
            self.sources[topic].process_log(self.queue, records)
        except BaseException:
            self.failed = True
            raise

    def process_next(self, topic: str) -> None:
        """Process exactly one record: the next one of ``topic`` (used by the test driver)."""
        pos = self.positions[topic]
        records = self.broker.read(topic, self.queue, pos, 1)
        self.positions[topic] = pos + len(records)
        self._process(topic, records)

    def commit(self) -> None:
        if self.failed:
            return
        for p in self.processors:
            p.flush()
        for s in self.stores.values():
            s.flush()
        self.producer.flush()
        for topic, pos in self.positions.items():
            if self.committed.get(topic) != pos:  # idle queues cost nothing
                self.broker.commit(self.group, topic, self.queue, pos)
                self.committed[topic] = pos

    def close(self) -> None:
        self.commit()
        for p in self.processors:
            p.close()
        for s in self.stores.values():
            s.close(flush=not self.failed)
