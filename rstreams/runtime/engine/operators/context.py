"""StreamContext: what a processor chain of one task (one queue) can reach."""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from rstreams.config import (
    IN_PROCESS_GUARANTEE,
    IN_PROCESS_STATE,
    ON_ERROR,
    Guarantee,
    RunConfig,
    StateBackend,
    dead_letter_topic,
)
from rstreams.errors import ON_ERROR_HINT, ConfigError, ProcessingError, StateStoreError
from rstreams.options import at_least, field_default, one_of, option
from rstreams.runtime.engine.operators.record import Record
from rstreams.runtime.engine.operators.watermarks import END, NO_TIME
from rstreams.runtime.queues.mapper import ModuloQueueMapper, QueueMapper
from rstreams.runtime.results import letter_fields
from rstreams.state.metered import MeteredStore
from rstreams.state.rocksdb import RocksDBConfig
from rstreams.userfn import describe_fn

if TYPE_CHECKING:
    from rstreams.runtime.engine.operators.producer import Producer

log = logging.getLogger("rstreams.engine")


@attrs.frozen
class EngineConfig:
    """Knobs of the embedded engine: of the in-process engine (LocalEngine, the test
    driver, ``run`` without a data dir), and the engine inside each durable worker,
    built from the run's options with :meth:`of`.

    Its choices are the run's types (:data:`~rstreams.config.OnError`...), checked by the
    same declarations (:func:`~rstreams.options.option`); its ``on_error`` default is
    RunConfig's, read from there.

        >>> from rstreams.config import RunConfig
        >>> e = EngineConfig.of(RunConfig(on_error="skip", idle_timeout=2.5), coalesce=True)
        >>> e.on_error, e.guarantee, e.state, e.source_idle_ms, e.coalesce
        ('skip', 'exactly-once', 'rocksdb', 2500, True)
        >>> EngineConfig(state="redis")
        Traceback (most recent call last):
        ...
        rstreams.errors.ConfigError: state must be one of rocksdb, memory; got 'redis'

    ``on_error`` decides what happens to a record a user function (or a deserializer)
    throws on: ``fail`` stops with a :class:`~rstreams.errors.ProcessingError` naming the
    step, topic, queue and offset (default); ``skip`` logs a warning, counts it in
    ``metrics["skipped"]`` and goes on; ``dead-letter`` also goes on, after writing the
    failure as a JSON record to the topic ``<job>-dead-letter``.

    ``combine`` merges, per key, the partial aggregates produced until the task's next
    commit before they cross a shuffle (map-side combine for count/sum/min/max).

    ``coalesce`` keeps only the latest update per key of each aggregation until the next
    commit (like Kafka Streams' record cache); the test driver turns it off so every
    update is visible.
    """

    # (typed str: the test driver passes its caller's text; checked as RunConfig's)
    on_error: str = option(field_default(RunConfig, "on_error"), check=one_of(ON_ERROR))
    coalesce: bool = False
    combine: bool = True
    #: Records a task of the in-process engine processes per poll, before the next task
    #: gets its turn (LocalEngine.run_until_idle). Deliberately not WorkerConfig's
    #: ``batch_size`` (5,000 a turn of a durable worker, where a turn also heartbeats,
    #: pulls and commits): in process, short turns let every sub-topology of a chunk
    #: move together, which the test driver's and the properties' orders rely on.
    batch_size: int = option(1000, check=at_least(1))
    #: Entries (keys) the tasks of one process may keep in memory, all together: cached
    #: state, partials combined before a shuffle, updates coalesced until a commit.
    #: Past it, cached state that is already stored is forgotten first, then the
    #: tasks holding the most commit early. Memory follows this, not the key count.
    cache_entries: int = 250_000
    default_queues: int = 1
    #: How sinks (shuffles included) map keys to queues; every producer of a job must
    #: agree, so it is part of the engine's configuration, not of a single sink.
    queue_mapper: QueueMapper = attrs.field(factory=ModuloQueueMapper)
    #: ``at-least-once`` or ``exactly-once`` (transactional commits; see the task module).
    #: In process it defaults to at-least-once on memory stores, which the durable
    #: runtime replaces with its own (see rstreams.config's IN_PROCESS_GUARANTEE).
    guarantee: Guarantee = option(IN_PROCESS_GUARANTEE)
    #: ``memory`` or ``rocksdb`` (then ``state_dir`` says where the databases live).
    state: StateBackend = option(IN_PROCESS_STATE)
    state_dir: str | None = None
    rocksdb: RocksDBConfig = attrs.field(factory=RocksDBConfig)
    #: Wall-clock ms after which a task whose user source queues gave no record stops
    #: holding back the watermark of the shuffles it writes (None: never, the default:
    #: a bounded run then gives the same results however slow a queue is).
    source_idle_ms: int | None = None
    #: Sources are input files, each read once and in order by one ingest that records
    #: where every queue ended when it reached the file's end (the durable runtime): a
    #: task that has read all its source queues then stops holding event time back at
    #: once, and an input read to its end stops holding it back at all (see the
    #: watermarks module).
    caught_up_idle: bool = False
    #: Judge event time by watermarks carried through shuffles with several producers.
    #: Off, each windowed step judges it by the largest timestamp it has seen (Kafka
    #: Streams' stream time): the test driver, which processes every record in the
    #: order it was produced, as one partition would, turns them off.
    watermarks: bool = True

    @classmethod
    def of(cls, run: RunConfig, **knobs: Any) -> EngineConfig:
        """The engine of a durable run's processes: the run's error policy, guarantee,
        state stores and idle timeout (the one place they are taken from it); ``knobs``
        set the others."""
        idle = run.idle_timeout
        return cls(
            on_error=run.on_error,
            guarantee=run.guarantee,
            state=run.state,
            source_idle_ms=None if idle is None else round(idle * 1000),
            **knobs,
        )


__all__ = ["EngineConfig", "StreamContext", "dead_letter_topic", "dead_letter_value"]


def shown_path(path: str) -> str:
    """``path`` relative to the working directory when it is under it (as the user most
    likely gave it), else as it is."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # (another drive)
        return path
    return path if rel.startswith(os.pardir) else rel


def dead_letter_value(value: Any) -> dict[str, Any]:
    """The ``value`` field (and ``value_encoding``) of a dead letter: see
    :func:`rstreams.runtime.results.letter_fields`.

        >>> dead_letter_value(b"caf\\xe9")
        {'value': 'Y2Fm6Q==', 'value_encoding': 'base64'}
        >>> dead_letter_value(b"{not json"), dead_letter_value("x"), dead_letter_value((1, "a"))
        ({'value': '{not json'}, {'value': 'x'}, {'value': (1, 'a')})
    """
    from rstreams.runtime.results import letter_fields

    return letter_fields("value", value)


class StreamContext:
    """Per task: its queue, its stores, the producer, error policy and metrics."""

    def __init__(
        self,
        job_id: str,
        task_id: str,
        queue: int,
        producer: Producer,
        stores: dict[str, MeteredStore],
        config: EngineConfig,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.job_id = job_id
        self.task_id = task_id
        self.queue = queue
        self.producer = producer
        self.stores = stores
        self.config = config
        #: Wall clock in epoch ms (the test driver's own clock there).
        self.clock: Callable[[], int] = clock or (lambda: time.time_ns() // 1_000_000)
        self.metrics: Counter[str] = Counter()
        #: The watermark of the shuffle producers feeding this task: the minimum over
        #: them; END when no input carries one (see the watermarks module).
        self.watermark: int = END
        #: The largest timestamp this task has sent through a shuffle sink.
        self.out_time: int = NO_TIME
        #: Shuffle topic -> fn(queue, time): tells that queue of the topic this task's
        #: time, before a record sent behind it (set by the task; see the watermarks
        #: module).
        self.tell: dict[str, Callable[[int, int], None]] = {}
        #: Shuffle topic -> how far behind a record may be before its queue is told
        #: (watermarks.told_slack).
        self.told_slack: dict[str, int] = {}
        #: Told shuffle topic -> the largest timestamp this task has sent to it: the
        #: time its step has from this producer (docs/windows.md, event time: what the
        #: producer sent to that step, not what it sent to others, as of each record).
        self.told_time: dict[str, int] = {}
        #: (topic, queue, offset) -> (input file, line) of a record read from a file, for
        #: error messages (set by the task: source topics only); None: never known.
        self.locate: Callable[[str, int, int], tuple[str, int] | None] | None = None

    def store(self, name: str) -> MeteredStore:
        try:
            return self.stores[name]
        except KeyError:
            raise ConfigError(
                f"task {self.task_id} has no state store {name!r}; it has {sorted(self.stores)}"
            ) from None

    def handle_error(self, step: str, record: Record, exc: BaseException, fn: Any = None) -> None:
        """Apply the on_error policy to ``record``, which failed in ``step``.

        A :class:`~rstreams.errors.StateStoreError` (a store could not be read or
        written) is not the record's failure: it is raised as it is, whatever the policy.
        """
        if isinstance(exc, StateStoreError):
            raise exc
        where = f"{record.topic}[{record.queue}]@{record.offset}"
        origin = None
        if self.locate is not None:
            origin = self.locate(record.topic, record.queue, record.offset)
            if origin is not None:
                where += f": {shown_path(origin[0])} line {origin[1]}"
        what = f" in {describe_fn(fn)}" if fn is not None else ""
        msg = (
            f"step {step!r} failed on the record at {where} (key={record.key!r}, "
            f"value={record.value!r:.120}){what}: {type(exc).__name__}: {exc}"
        )
        policy = self.config.on_error
        if policy == "fail":
            raise ProcessingError(
                msg + "\n  " + ON_ERROR_HINT,
                step=step,
                topic=record.topic,
                queue=record.queue,
                offset=record.offset,
            ) from exc
        self.metrics["skipped"] += 1
        log.warning("%s (%s)", msg, "skipped" if policy == "skip" else "dead-lettered")
        if policy == "dead-letter":
            payload: dict[str, Any] = {
                "step": step,
                "topic": record.topic,
                "queue": record.queue,
                "offset": record.offset,
            }
            if origin is not None:
                payload["file"], payload["line"] = origin
            payload.update(letter_fields("key", record.key))
            payload.update(dead_letter_value(record.value))
            payload["error"] = f"{type(exc).__name__}: {exc}"
            self.producer.send(
                dead_letter_topic(self.job_id),
                0,
                None,
                json.dumps(payload).encode("utf-8"),
                record.timestamp,
                (),
            )
            self.metrics["dead_lettered"] += 1
