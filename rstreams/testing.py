"""Test a topology in process, with no broker or server.

:class:`TopologyTestDriver` runs the compiled topology through the same processors,
shuffle topics, state stores and commit path as the embedded runtime, over in-memory
queues. Records are processed one at a time in the order they were produced (so the
output is as if every topic had a single queue), and every update of every aggregation
is emitted. After each piped record, the tasks that processed something prepare their
commit: processors flush and stores serialize their changes, so whatever a commit would
raise (a state value that can not be stored) is raised by that ``pipe()``. The writes
(changelogs, stores, offsets) follow together every 1,000 pipes and whenever
:meth:`~TopologyTestDriver.state` reads the stores; nothing else can see them. Event
time is Kafka Streams' stream time, the largest timestamp a windowed step has seen, on
any of its queues (the piped records are one producer: the order they are piped in is
the order they are processed in; see docs/windows.md, event time). Only
event time closes windows and expires join records, and only up to the last record
piped: call :meth:`~TopologyTestDriver.end_of_input` to get the final results of
close-mode windows and left/outer joins, as a bounded run gives them.

    >>> import re
    >>> from rstreams import StreamBuilder
    >>> from rstreams.testing import TopologyTestDriver
    >>> b = StreamBuilder("wordcount")
    >>> (b.source("sentences")
    ...    .flatMap(lambda line: re.findall(r"\\w+", line.lower()))
    ...    .keyBy(lambda w: w)
    ...    .count()
    ...    .toRStream()
    ...    .sink("word-counts"))
    >>> with TopologyTestDriver(b.build()) as driver:
    ...     driver.pipe("sentences", "hello world hello", timestamp=5)
    ...     out = driver.read("word-counts")
    ...     state = driver.state("wordcount-sentences-count-3-store")
    >>> [(r.key, r.value, r.timestamp) for r in out]
    [('hello', 1, 5), ('world', 1, 5), ('hello', 2, 5)]
    >>> state
    {'hello': 2, 'world': 1}
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

from rstreams.errors import ConfigError, SerdeError
from rstreams.planner.topology import Topology
from rstreams.runtime.engine.coordination.local import LocalEngine
from rstreams.runtime.engine.operators.context import EngineConfig, dead_letter_topic
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.engine.tasks.lifecycle import TaskState
from rstreams.runtime.positions import position_bases, position_header
from rstreams.runtime.queues.base import Headers, RecordColumns
from rstreams.runtime.queues.mapper import QueueMapper, get_mapper
from rstreams.runtime.queues.memory import MemoryBroker, MemoryQueue
from rstreams.runtime.results import hashable_key
from rstreams.serde import SERDES, SHAREABLE, Serde, _deserialized

__all__ = ["OutputRecord", "TopologyTestDriver"]

#: The processors that judge event time (windowed aggregations and joins).
TIMED_KINDS = frozenset({"window-aggregate", "join"})

_RUNNING = TaskState.RUNNING

#: Pipes between two commits that write (each pipe prepares the commit of the tasks it
#: made work: see TopologyTestDriver._commit_later).
COMMIT_EVERY = 1000


class OutputRecord(tuple):
    """A record read back from a topic by the driver: ``key``, ``value``,
    ``timestamp``, ``headers``, ``topic``, ``queue`` and ``offset``, immutable.

    A named tuple underneath (as :class:`~rstreams.runtime.queues.base.LogRecord`), so
    that :meth:`TopologyTestDriver.read` makes thousands with no Python call per
    record; it equals only another OutputRecord with the same fields.

    >>> r = OutputRecord("k", 1, 5)
    >>> r
    OutputRecord(key='k', value=1, timestamp=5, headers=(), topic='', queue=0, offset=0)
    >>> r == OutputRecord("k", 1, 5), r == ("k", 1, 5, (), "", 0, 0)
    (True, False)
    """

    __slots__ = ()

    def __new__(
        cls,
        key: Any,
        value: Any,
        timestamp: int,
        headers: Headers = (),
        topic: str = "",
        queue: int = 0,
        offset: int = 0,
    ) -> OutputRecord:
        return tuple.__new__(cls, (key, value, timestamp, headers, topic, queue, offset))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    key: Any = property(itemgetter(0))
    value: Any = property(itemgetter(1))
    timestamp: int = property(itemgetter(2))  # type: ignore[assignment]
    headers: Headers = property(itemgetter(3))  # type: ignore[assignment]
    topic: str = property(itemgetter(4))  # type: ignore[assignment]
    queue: int = property(itemgetter(5))  # type: ignore[assignment]
    offset: int = property(itemgetter(6))  # type: ignore[assignment]

    # (Not NotImplemented for another type: a plain tuple would then answer.)
    def __eq__(self, other: object) -> bool:
        return type(other) is OutputRecord and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        fields = ("key", "value", "timestamp", "headers", "topic", "queue", "offset")
        return f"OutputRecord({', '.join(f'{f}={v!r}' for f, v in zip(fields, self))})"


_new_output = functools.partial(tuple.__new__, OutputRecord)


class _RecordingProducer(Producer):
    """Appends at once and remembers the global order of every record produced.

    ``unprocessed`` holds each record not yet processed, as ``(topic, queue, offset,
    timestamp, key, value, headers)``: the driver hands it to its task as it is, with
    no read back from the broker. Records go straight into the memory broker's queues,
    as :meth:`MemoryBroker.append_one <rstreams.runtime.queues.memory.MemoryBroker>`
    puts them there (with its checks), without its call: every record passes here.
    """

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self.unprocessed: deque[tuple[Any, ...]] = deque()
        #: Topics a task reads (the driver sets them): only their records wait to be
        #: processed.
        self.read_topics: set[str] = set()
        #: Per topic, the queue and the offset of each record produced, in order (two
        #: columns: no tuple per record, none to unzip when read).
        self.order: dict[str, tuple[list[int], list[int]]] = {}
        #: Per topic: its queues, its ``order`` columns, whether a task reads it.
        self._topics: dict[str, tuple[list[MemoryQueue], list[int], list[int], bool]] = {}
        self._memory = broker

    def reading(self, topics: set[str]) -> None:
        """Set :attr:`read_topics`."""
        self.read_topics = topics
        self._topics.clear()

    def _topic(self, topic: str) -> tuple[list[MemoryQueue], list[int], list[int], bool]:
        queues = self._memory.queues_of(topic)  # (raises for an unknown topic)
        qs, offsets = self.order.setdefault(topic, ([], []))
        entry = self._topics[topic] = (queues, qs, offsets, topic in self.read_topics)
        return entry

    def send_routed(
        self,
        topic: str,
        queues: int | list[int],
        timestamps: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[Headers],
    ) -> None:
        """Appends at once, in the order sent across queues too (the driver's batches
        are small: a record at a time costs less than grouping them by queue)."""
        if len(values) == 1:  # the usual: a record at a time, no zip of columns
            q = queues if isinstance(queues, int) else queues[0]
            self.send(topic, q, keys[0], values[0], timestamps[0], headers[0])
            return
        qs = [queues] * len(values) if isinstance(queues, int) else queues
        mqs, order_qs, order_offsets, read = self._topics.get(topic) or self._topic(topic)
        if not set(map(type, timestamps)) <= {int} or not set(qs) <= set(range(len(mqs))):
            # One at a time: those before the first bad one go, as they did.
            for q, ts, k, v, h in zip(qs, timestamps, keys, values, headers):
                self.send(topic, q, k, v, ts, h)
            return
        offsets = []
        for q, ts, k, v, h in zip(qs, timestamps, keys, values, headers):
            mq = mqs[q]
            records = mq.rows() if mq.chunks else mq.records  # (see send)
            offset = mq.base + len(records)
            records.append((offset, ts, k, v, h))
            offsets.append(offset)
        order_qs.extend(qs)
        order_offsets.extend(offsets)
        if read:
            self.unprocessed.extend(
                zip(itertools.repeat(topic), qs, offsets, timestamps, keys, values, headers)
            )

    def send(
        self, topic: str, queue: int, key: bytes | None, value: bytes | None, timestamp: int,
        headers: Headers,
    ) -> None:  # fmt: skip
        """One record, appended at once."""
        mqs, order_qs, order_offsets, read = self._topics.get(topic) or self._topic(topic)
        if type(timestamp) is int and 0 <= queue < len(mqs):
            mq = mqs[queue]
            # (Records appended as columns, by anything but this producer, are rows first:
            # an offset counts them.)
            records = mq.rows() if mq.chunks else mq.records
            offset = mq.base + len(records)
            records.append((offset, timestamp, key, value, headers))
        else:  # (it raises the broker's error)
            offset = self._memory.append_one(topic, queue, timestamp, key, value, headers)
        order_qs.append(queue)
        order_offsets.append(offset)
        if read:
            self.unprocessed.append((topic, queue, offset, timestamp, key, value, headers))

    def send_columns(
        self,
        topic: str,
        queue: int,
        timestamps: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[Headers],
    ) -> None:
        self.send_routed(topic, queue, timestamps, keys, values, headers)

    def flush(self) -> list[tuple[str, int]]:
        return []


_BUILTIN_SERDES = frozenset(type(s) for s in SERDES.values())


def _decoded(serde: Serde, raws: Sequence[bytes | None]) -> list[Any]:
    """``deserialize_rows``' column of ``raws`` (None stays None) for a read: with a
    built-in serde, bytes that repeat (the usual keys and counts) are decoded once, when
    what they decode to is immutable: the same objects, decoded a tenth as often."""
    if len(raws) < 64 or type(serde) not in _BUILTIN_SERDES:
        return _deserialized(serde, raws)
    table: dict[Any, Any] = dict.fromkeys(raws)
    table.pop(None, None)
    if len(table) * 2 > len(raws):
        return _deserialized(serde, raws)
    distinct = list(table)
    objs = serde.deserialize_many(distinct)
    if not set(map(type, objs)) <= SHAREABLE:
        return _deserialized(serde, raws)
    table = dict(zip(distinct, objs))
    table[None] = None
    return list(map(table.__getitem__, raws))


class TopologyTestDriver:
    """Runs a Topology in process for tests.

    Args:
        topology: what ``StreamBuilder.build()`` returned.
        queues: queue count per topic (default: as declared, else 1 for user topics;
            shuffle topics use the count the planner chose).
        on_error: ``"fail"`` (default), ``"skip"`` or ``"dead-letter"``; see
            :class:`~rstreams.runtime.engine.operators.context.EngineConfig`.
        start_time: initial wall-clock time in epoch ms (see :meth:`advance_time`).
        queue_mapper: how keys map to queues: ``"modulo"`` (default) or ``"hash-ring"``.
    """

    def __init__(
        self,
        topology: Topology,
        *,
        queues: dict[str, int] | None = None,
        on_error: str = "fail",
        start_time: int = 0,
        queue_mapper: str | QueueMapper | None = None,
    ) -> None:
        if not isinstance(topology, Topology):
            raise ConfigError(
                f"TopologyTestDriver needs a Topology (StreamBuilder.build()); "
                f"got {type(topology).__name__}"
            )
        self.topology = topology
        self._time = start_time
        self._broker = MemoryBroker()
        for topic, n in (queues or {}).items():
            self._broker.create_topic(topic, n)
        self._producer = _RecordingProducer(self._broker)
        self._engine = LocalEngine(
            topology,
            self._broker,
            EngineConfig(
                on_error=on_error,
                coalesce=False,
                combine=False,
                queue_mapper=get_mapper(queue_mapper),
                watermarks=False,
            ),
            producer=self._producer,
            clock=lambda: self._time,
        )
        self._producer.reading({topic for topic, _ in self._engine.readers})
        self._task_index = {task: i for i, task in enumerate(self._engine.tasks)}
        self._preparers = {task: task.store_preparers() for task in self._engine.tasks}
        #: (topic, queue) -> the task that reads it, and its one-record entry (if any).
        self._readers = {
            (topic, q): (task, task.one_record(topic))
            for (topic, q), task in self._engine.readers.items()
        }
        self._route = self._engine.config.queue_mapper.route
        self._read: dict[str, int] = {}
        self._round_robin = itertools.count()
        # A topology with a temporal join orders records of equal timestamps by their
        # position: here, the pipe() call's number (rstreams.runtime.positions).
        self._pipe_number = itertools.count() if position_bases(topology) else None
        self._uncommitted: dict[Any, None] = {}
        # Tasks whose commit is prepared and not yet written, and the pipes since the
        # last commit (see _commit_later).
        self._prepared: dict[Any, None] = {}
        self._pipes = 0
        # The tasks of each windowed step or join with several queues, with its
        # processor in each: they judge by one time (see _share_time).
        steps: dict[str, list[tuple[Any, Any]]] = {}
        for task in self._engine.tasks:
            for p in task.processors:
                if p.kind in TIMED_KINDS:
                    steps.setdefault(p.name, []).append((task, p))
        self._timed_steps = [s for s in steps.values() if len(s) > 1]
        # The steps of each task's timed processors: a record moves only the time of
        # the task that processes it (see _share_time).
        self._steps_of: dict[Any, list[list[tuple[Any, Any]]]] = {}
        for step in self._timed_steps:
            for task in dict.fromkeys(task for task, _ in step):
                self._steps_of.setdefault(task, []).append(step)
        # Every step shares after the next record (at first, and after work that moves
        # the time of any task: end of input, wall-clock work, a failure half-way).
        self._share_all = True

    # -- input -------------------------------------------------------------------------

    def pipe(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        timestamp: int | None = None,
        headers: Headers = (),
    ) -> None:
        """Write one record to ``topic`` and process everything it causes.

        ``value`` and ``key`` are serialized with the source's deserializer's serde;
        ``bytes`` are written as they are (use that to test undecodable input).
        ``timestamp`` defaults to the driver's wall clock.
        """
        spec = self.topology.topics.get(topic)
        if spec is None or spec.role != "source":
            raise ConfigError(
                f"topic {topic!r} is not a source of topology {self.topology.job_id!r}; "
                f"its sources are {self.topology.source_topics}"
            )
        kb = self._encode(key, spec.key_serde, topic, "key")
        vb = self._encode(value, spec.value_serde, topic, "value")
        nq = self._engine.queue_counts[topic]
        q = self._route([kb], nq, next(self._round_robin) % nq)  # an int, for one record
        assert isinstance(q, int)
        ts = self._time if timestamp is None else timestamp
        if self._pipe_number is not None:
            headers = (*headers, position_header(next(self._pipe_number)))
        self._producer.send(topic, q, kb, vb, ts, headers)
        try:
            self._drain()
        except BaseException:
            self._settle()
            raise

    def pipe_all(self, topic: str, values: Iterable[Any], timestamp: int | None = None) -> None:
        """Pipe each value of ``values`` (keyless) in order."""
        for v in values:
            self.pipe(topic, v, timestamp=timestamp)

    @staticmethod
    def _encode(obj: Any, serde: Serde, topic: str, what: str) -> bytes | None:
        if obj is None or isinstance(obj, bytes):
            return obj
        try:
            return serde.serialize(obj)
        except (SerdeError, NotImplementedError) as e:
            raise SerdeError(f"can not write {what} {obj!r:.60} to topic {topic!r}: {e}") from None

    def _drain(self, commit_all: bool = False) -> None:
        """Process every record produced, one at a time in the order produced, then
        commit; again while the commit produced more. Only the tasks that processed a
        record are committed (the others have nothing to commit: the driver neither
        coalesces nor combines), unless ``commit_all`` (after wall-clock work or the end
        of input, which reach every task)."""
        pending = self._producer.unprocessed
        readers = self._readers
        # Tasks that processed a record since they last committed (kept across calls:
        # a failure leaves them for the next commit, as committing every task would).
        touched = self._uncommitted
        timed = self._timed_steps
        while True:
            while pending:
                topic, q, offset, ts, key, value, headers = pending.popleft()
                reader = readers.get((topic, q))
                if reader is None:
                    continue
                task, one = reader
                touched[task] = None
                positions = task.positions
                if positions[topic] != offset:
                    task.process_next(topic)
                elif one is None or task.step_clock.idle or task.lifecycle.state is not _RUNNING:
                    positions[topic] = offset + 1  # (what process_next does)
                    columns = RecordColumns([offset], [ts], [key], [value], [headers])
                    task.process_records(topic, columns)
                else:  # the usual: the record to the task's source as it is
                    positions[topic] = offset + 1
                    try:
                        one(q, offset, ts, key, value, headers)
                    except BaseException:
                        task.lifecycle.fail()  # (as process_records fails it)
                        raise
                if timed:
                    self._share_time(touched, task)
            if commit_all:
                self._commit(all_tasks=True)
            elif touched:
                self._commit_later(touched)
            touched.clear()
            if not pending:
                return

    def _share_time(self, touched: dict[Any, None], task: Any = None) -> None:
        """After each record: every task of a windowed step or join is told the largest
        timestamp any of them has seen, the time the pipe sequence (one producer) has
        reached at that step, whatever queue its records went to (docs/windows.md,
        event time; :meth:`StepClock.told <rstreams.semantics.clock.StepClock.told>`).
        What that time closes or expires in any task comes out now.

        Only ``task`` (it processed the record) can have moved its time: only its
        steps are looked at (every step without ``task``, or after work that reaches
        every task)."""
        if self._share_all or task is None:
            self._share_all = False
            steps = self._timed_steps
        else:
            steps = self._steps_of.get(task, [])
        for step in steps:
            top = max(p.max_time for _, p in step)
            for task, p in step:
                if p.max_time < top:
                    # The pipe sequence, one producer, tells the task its time, as the
                    # engine's single producer tells each queue after a batch.
                    p.max_time = task.step_clock.told("", top)
                    touched[task] = None
                    p.on_watermark()

    def _commit_later(self, touched: dict[Any, None]) -> None:
        """Commit ``touched`` now in all but the writing: each task prepares its commit
        (so what a commit would raise, e.g. a state value that can not be stored, is
        raised by the pipe that caused it), and the writes of the changelog and the
        stores happen together at the next :meth:`_commit` (what a commit writes is
        seen by nothing but :meth:`state`, which commits first)."""
        prepared = self._prepared
        # In the order a commit would take them; only those with something to prepare
        # prepare (most are stateless: nothing to flush or serialize).
        tasks = sorted(touched, key=self._task_index.__getitem__) if len(touched) > 1 else touched
        preparers = self._preparers
        for task in tasks:
            if task.prepares:
                stores = preparers[task]
                if stores is None or task.lifecycle.state is not _RUNNING:
                    task.prepare_commit()
                else:  # what prepare_commit does, less two calls
                    try:
                        for prepare in stores:
                            prepare(self._time)  # (the tasks' clock)
                    except BaseException:
                        task.lifecycle.fail()  # as prepare_commit fails it
                        raise
            prepared[task] = None
        self._pipes += 1
        if self._pipes >= COMMIT_EVERY:
            self._commit()

    def _settle(self) -> None:
        """Something failed: a task that failed commits nothing more, and what the
        commits prepared for it by earlier pipes took is written now, as those commits
        would have written it."""
        self._share_all = True
        for task in list(self._prepared):
            if task.failed:
                del self._prepared[task]
                task.write_prepared()

    def _commit(self, all_tasks: bool = False) -> None:
        """Commit the tasks prepared since the last commit, or every task (wall-clock
        work and the end of input reach them all). Should it fail, the prepared tasks
        stay for :meth:`_settle`."""
        if all_tasks:
            self._engine.commit()
        elif self._prepared:
            self._engine.commit(self._prepared)
        self._prepared.clear()
        self._pipes = 0

    def end_of_input(self) -> None:
        """Declare the input finished, as a bounded ``rstreams run`` does at its end:
        every window still open closes (``emit="close"`` results with
        ``closed="end-of-input"``) and left/outer joins emit the records still waiting
        for a match, joined with ``None``. Call it before reading the final results of
        close-mode windows and left/outer joins: without it, the last windows and the
        unmatched records of the last ``before + after + grace`` of event time never
        come out, since no later record moves stream time past them.

        >>> from datetime import timedelta
        >>> from rstreams import SessionWindow, StreamBuilder
        >>> from rstreams.testing import TopologyTestDriver
        >>> b = StreamBuilder("sessions")
        >>> (b.source("clicks")
        ...    .keyBy(lambda user: user)
        ...    .window(SessionWindow(timedelta(minutes=30)), emit="close")
        ...    .count()
        ...    .sink("session-clicks"))
        >>> with TopologyTestDriver(b.build()) as driver:
        ...     for user, minute in [("ann", 0), ("ann", 10), ("ann", 50)]:
        ...         driver.pipe("clicks", user, timestamp=minute * 60_000)
        ...     before = driver.read("session-clicks")
        ...     driver.end_of_input()
        ...     after = driver.read("session-clicks")
        >>> [(r.key.start // 60_000, r.value, r.key.closed) for r in before]
        [(0, 2, 'event-time')]
        >>> [(r.key.start // 60_000, r.value, r.key.closed) for r in after]
        [(50, 1, 'end-of-input')]

        The driver's end of input, like a run's, is final: records piped after it are
        processed, but the windows and joins it closed stay closed.
        """
        self._share_all = True
        try:
            for sub in self.topology.subtopologies:
                for task in self._engine.tasks:
                    if task.sub is sub:
                        task.end_of_input()
                self._drain(commit_all=True)
        except BaseException:
            self._settle()
            raise

    def advance_time(self, ms: int) -> None:
        """Move the driver's wall clock forward by ``ms`` milliseconds (and run the
        wall-clock driven work it triggers, such as ``close_after_idle``)."""
        if ms < 0:
            raise ConfigError(f"advance_time() needs ms >= 0; got {ms}")
        self._time += ms
        # Wall-clock work (windows closing after idling) happens now, and what it emits
        # is processed like any other record.
        self._share_all = True
        try:
            for task in self._engine.tasks:
                task.punctuate(self._time)
            self._drain(commit_all=True)
        except BaseException:
            self._settle()
            raise

    # -- output ------------------------------------------------------------------------

    def read(self, topic: str) -> list[OutputRecord]:
        """Records written to ``topic`` since the last read, in the order written.

        Keys and values are read back with the topic's serdes. A windowed aggregation's
        records are keyed by :class:`~rstreams.windowed.Windowed`: the record key as
        ``.key.key``, the window as ``.key.window.start`` and ``.key.window.end``, and
        ``.key.closed`` for results emitted on close.

        >>> from rstreams import StreamBuilder, TumblingWindow
        >>> b = StreamBuilder("w")
        >>> (b.source("in").selectTimestamp(int).keyBy(lambda v: "n")
        ...   .window(TumblingWindow(10)).count().sink("counts"))
        >>> with TopologyTestDriver(b.build()) as driver:
        ...     driver.pipe_all("in", ["3", "7", "12"])
        ...     [(r.key.key, r.key.window.start, r.key.window.end, r.value)
        ...      for r in driver.read("counts")]
        [('n', 0, 10, 1), ('n', 0, 10, 2), ('n', 10, 20, 1)]
        """
        spec = self.topology.topics.get(topic)
        if spec is not None:
            key_serde, value_serde = spec.key_serde, spec.value_serde
        elif topic == dead_letter_topic(self.topology.job_id):
            key_serde = value_serde = SERDES["json"]
        else:
            raise ConfigError(
                f"topic {topic!r} is not part of topology {self.topology.job_id!r}; "
                f"its topics are {sorted(self.topology.topics)}"
            )
        # No collection while reading: the reading allocates a few objects per record
        # and makes no cycles, and each collection it would set off walks every record
        # the broker holds (half of the time of a large read).
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._read_records(topic, key_serde, value_serde)
        finally:
            if enabled:
                gc.enable()

    def _read_records(self, topic: str, key_serde: Serde, value_serde: Serde) -> list[OutputRecord]:
        """:meth:`read`'s records, deserialized with ``key_serde`` and ``value_serde``."""
        all_qs, all_offsets = self._producer.order.get(topic, ([], []))
        start = self._read.get(topic, 0)
        self._read[topic] = len(all_offsets)
        qs, offsets = all_qs[start:], all_offsets[start:]
        if not offsets:
            return []
        timestamps, raw_keys, raw_values, headers = self._stored(topic, qs, offsets)
        try:
            keys, values = _decoded(key_serde, raw_keys), _decoded(value_serde, raw_values)
        except Exception:  # record by record: the first bad one raises its error
            kde, vde = key_serde.deserialize, value_serde.deserialize
            keys, values = [], []
            for k, v in zip(raw_keys, raw_values):
                keys.append(None if k is None else kde(k))
                values.append(None if v is None else vde(v))
        return list(
            map(_new_output, zip(keys, values, timestamps, headers, repeat(topic), qs, offsets))
        )

    def _stored(self, topic: str, qs: list[int], offsets: list[int]) -> tuple[Sequence[Any], ...]:
        """Timestamps, keys, values and headers of the records at ``offsets`` of queues
        ``qs`` of ``topic``, as columns: one read per queue, and for the usual (one
        queue, offsets in a row) no step per record."""
        n, q = len(offsets), qs[0]
        if qs.count(q) == n and offsets[-1] - offsets[0] == n - 1:
            c = self._broker.read_columns(topic, q, offsets[0], n)
            return c.timestamps, c.keys, c.values, c.headers
        read = self._broker.read
        got: dict[int, tuple[int, list[Any]]] = {}
        rows = []
        for q, off in zip(qs, offsets):
            span = got.get(q)
            if span is None:  # (from the first offset wanted: the later ones follow)
                span = got[q] = (off, read(topic, q, off))
            rows.append(span[1][off - span[0]])
        return tuple(zip(*rows))[1:]

    def read_values(self, topic: str) -> list[Any]:
        """Shorthand: the values of :meth:`read`."""
        return [r.value for r in self.read(topic)]

    def read_table(self, topic: str) -> dict[Any, Any]:
        """The last value per key among the records not yet read from ``topic``, as
        ``rstreams run --output`` and Spark's ``outputs=`` keep it: a key whose last
        value is None (a tombstone: a session merged into another) is left out, and a
        key that is a list (a JSON key of several parts) is read as a tuple.

        >>> from rstreams import SessionWindow, StreamBuilder
        >>> b = StreamBuilder("s")
        >>> (b.source("clicks").keyBy(lambda v: "u").window(SessionWindow(20, grace=20)).count()
        ...     .sink("sessions"))
        >>> with TopologyTestDriver(b.build()) as d:
        ...     for ts in (0, 30, 15):  # 15 joins the sessions at 0 and 30 into one
        ...         d.pipe("clicks", "c", timestamp=ts)
        ...     d.read_table("sessions")
        {Windowed(key='u', start=0, end=30, closed=None): 3}
        """
        table: dict[Any, Any] = {}
        for r in self.read(topic):
            key = hashable_key(r.key)
            if r.value is None:
                table.pop(key, None)
            else:
                table[key] = r.value
        return table

    def state(self, store: str) -> dict[Any, Any]:
        """Current content of state store ``store`` (all queues together) as a dict."""
        if store not in self.topology.stores:
            raise ConfigError(
                f"no state store {store!r} in topology {self.topology.job_id!r}; "
                f"its stores are {sorted(self.topology.stores)}"
            )
        self._commit()  # the stores hold what the tasks prepared to commit
        out: dict[Any, Any] = {}
        for task in self._engine.tasks:
            s = task.stores.get(store)
            if s is not None:
                out.update(s.items())
        return out

    @property
    def metrics(self) -> dict[str, int]:
        """Counters summed over tasks (e.g. ``skipped``, ``dead_lettered``)."""
        return self._engine.metrics()

    def close(self) -> None:
        self._engine.close()

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        # A failure is on its way out: closing commits, and a commit can fail again on the
        # same bad state (e.g. an unstorable aggregate); that second error must not
        # replace the one the test is looking for.
        with contextlib.suppress(Exception):
            self.close()
