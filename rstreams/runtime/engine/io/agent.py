"""Pulling agents and the queue cache (after Orleans' persistent stream pulling agents).

One :class:`PullingAgent` per assigned queue pulls record batches from the broker into
a bounded :class:`QueueCache`. Consumers of the queue each have a cursor in the cache: a
fast consumer reads as soon as records are in, a slow one lags, and an entry is purged
once every cursor has passed it. When the cache is full the agent stops pulling until
there is room (backpressure); it never drops a record nobody has read.

Agents are driven by one :class:`AgentPool` per worker, from the worker's loop (as
Orleans runs agents in turns on the silo's scheduler) or, optionally, on a thread of
their own: an agent pulls when its timer is due (``pull_interval``, default 100 ms) or
at once while data keeps coming (the last pull was full), and never when its cache has
no room.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from rstreams.runtime.queues.base import LogRecord, RecordColumns
from rstreams.runtime.queues.broker import Broker

_EMPTY = RecordColumns(range(0), (), (), (), ())


class QueueCache:
    """A bounded window of one queue's records with one cursor per consumer.

    Records are held as the column chunks they were read in (no object per record).
    Cursors are offsets (the next offset the consumer wants). ``capacity`` bounds the
    number of cached records; :meth:`room` says how many more fit.

    >>> c = QueueCache(capacity=3, start=0, consumers=["a", "b"])
    >>> c.add([LogRecord(i, 0, None, b"x") for i in range(3)])
    >>> c.room()
    0
    >>> list(c.take("a", 10).offsets)
    [0, 1, 2]
    >>> c.room()  # b has not read them yet: nothing can be purged
    0
    >>> list(c.take("b", 2).offsets), c.room()
    ([0, 1], 2)
    """

    def __init__(self, capacity: int, start: int, consumers: list[str]) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity must be >= 1; got {capacity}")
        self.capacity = capacity
        self._chunks: deque[RecordColumns] = deque()
        self._size = 0  # records held: those of the chunks, less the first one's _skip
        self._skip = 0  # leading records of the first chunk every cursor has passed
        self._cursors = dict.fromkeys(consumers, start)
        self.next_offset = start  # where the agent pulls next
        self._lock = threading.Lock()

    def room(self) -> int:
        with self._lock:
            return self.capacity - self._size

    def add(self, records: RecordColumns | list[LogRecord]) -> None:
        if isinstance(records, list):
            records = RecordColumns.from_records(records)
        if not len(records):
            return
        with self._lock:
            if len(records) > self.capacity - self._size:
                raise OverflowError("the agent must not pull more than the cache has room for")
            self._chunks.append(records)
            self._size += len(records)
            self.next_offset = records.last_offset + 1

    def take(self, consumer: str, max_records: int) -> RecordColumns:
        """Up to ``max_records`` records at and after ``consumer``'s cursor (from one
        chunk: the consumer comes back for the next)."""
        with self._lock:
            cursor = self._cursors[consumer]
            if cursor >= self.next_offset:
                return _EMPTY
            for chunk in self._chunks:  # usually the first
                if chunk.last_offset >= cursor:
                    break
            else:
                return _EMPTY
            # Offsets may have gaps (a compacted topic): index_of finds the first >= cursor.
            i = chunk.index_of(cursor)
            out = chunk if i == 0 and max_records >= len(chunk) else chunk.slice(i, i + max_records)
            self._cursors[consumer] = out.last_offset + 1
            self._purge()
            return out

    def _purge(self) -> None:
        low = min(self._cursors.values())
        chunks = self._chunks
        while chunks and chunks[0].last_offset < low:
            self._size -= len(chunks.popleft()) - self._skip
            self._skip = 0
        if chunks:
            i = chunks[0].index_of(low)
            if i > self._skip:
                self._size -= i - self._skip
                self._skip = i

    def __len__(self) -> int:
        return self._size


class PullingAgent:
    """Pulls one queue of one topic into its cache."""

    def __init__(
        self,
        broker: Broker,
        topic: str,
        queue: int,
        cache: QueueCache,
        *,
        batch: int = 1000,
        pull_interval: float = 0.1,
    ) -> None:
        self.broker = broker
        self.topic = topic
        self.queue = queue
        self.cache = cache
        self.batch = batch
        self.pull_interval = pull_interval
        self.due = 0.0
        self.pulled = 0

    def pull(self, now: float) -> int:
        """Pull once if due and there is room; returns records pulled."""
        if now < self.due:
            return 0
        room = self.cache.room()
        if room <= 0:
            self.due = now  # backpressure: retry as soon as a consumer makes room
            return 0
        records = self.broker.read_columns(
            self.topic, self.queue, self.cache.next_offset, min(room, self.batch)
        )
        self.cache.add(records)
        self.pulled += len(records)
        # Data keeps coming (a full pull): go again at once; else wait for the timer.
        self.due = now if len(records) == min(room, self.batch) else now + self.pull_interval
        return len(records)


class AgentPool:
    """The pulling agents of one worker: :meth:`pull_all` runs the due ones (call it from
    a loop), or :meth:`start` runs them on a background thread."""

    def __init__(self, idle_sleep: float = 0.005) -> None:
        self._agents: dict[tuple[str, int], PullingAgent] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._idle_sleep = idle_sleep
        self.error: BaseException | None = None

    def add(self, agent: PullingAgent) -> None:
        with self._lock:
            self._agents[(agent.topic, agent.queue)] = agent

    def remove(self, topic: str, queue: int) -> None:
        with self._lock:
            self._agents.pop((topic, queue), None)

    def wake(self, queues: list[tuple[str, int]]) -> None:
        """New data was just appended to these queues: pull them now, not at the timer."""
        with self._lock:
            for key in queues:
                agent = self._agents.get(key)
                if agent is not None:
                    agent.due = 0.0

    def pull_all(self, now: float | None = None) -> int:
        """Pull the agents due at ``now`` (default: ``time.monotonic()``)."""
        with self._lock:
            agents = list(self._agents.values())
        now = time.monotonic() if now is None else now
        return sum(a.pull(now) for a in agents)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rstreams-agents", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self.pull_all() == 0:
                    self._stop.wait(self._idle_sleep)
        except BaseException as e:  # surfaced by the worker loop
            self.error = e

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
