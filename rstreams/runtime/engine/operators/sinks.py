"""Sinks of the embedded engine: user sinks and shuffle sinks (phase 3 of the build).

A sink serializes the records of a batch (or the one record of the test driver's
record-at-a-time path), chooses each one's queue by its key and hands them to the
task's producer. Shuffles in front of count/sum/min/max carry *partial aggregates*:
the shuffle sink turns each value into a partial (1 for count, ``fn(value)`` for the
others) and, when ``EngineConfig.combine`` is on, merges them per key until the task's
next commit before they cross the shuffle (map-side combine); see
:mod:`rstreams.runtime.engine.operators.processors`.
"""

from __future__ import annotations

import itertools
from collections import _count_elements  # type: ignore[attr-defined]
from collections.abc import Callable
from typing import Any

from rstreams.dsl import nodes as n
from rstreams.errors import SerdeError
from rstreams.planner.topology import ProcessorBuilder, ProcessorFactory, register_processor
from rstreams.runtime.engine.operators.batch import Batch
from rstreams.runtime.engine.operators.context import StreamContext
from rstreams.runtime.engine.operators.processors import Processor, apply_column
from rstreams.runtime.engine.operators.watermarks import NO_TIME, send_told
from rstreams.runtime.queues.base import Headers
from rstreams.semantics.aggregations import Aggregation
from rstreams.semantics.nullkeys import NULL_KEYS
from rstreams.serde import INTERNAL_SERDE, Serde, remembering_encoder, serialize_rows

#: The processor kinds defined here: kind -> builder (see ``operators.registry``).
BUILDERS: dict[str, ProcessorBuilder] = {}

_MISSING = object()


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


class _SinkBase(Processor):
    """Serializes records and hands them to the producer, partitioned by key."""

    key_serde: Serde
    value_serde: Serde
    #: Spread records with a None key over the queues (user sinks). A shuffle does not:
    #: a join behind it still sees its records with a None key (to emit them unmatched).
    round_robin_none_keys = True

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert factory.topic is not None
        self.topic = factory.topic
        self._round_robin = itertools.count()

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        self.queues = ctx.producer.queue_count(self.topic)
        self.route = ctx.config.queue_mapper.route
        self._send = ctx.producer.send_routed
        self._send_one = ctx.producer.send
        #: Sends a batch once its queues are chosen, when more than ``_send`` is to do
        #: (see ShuffleSinkProcessor._send_telling); None: ``_send``.
        self._send_chosen: Callable[[Batch, Any, list[Any], list[Any]], None] | None = None
        # Instance attributes (a class attribute read through an instance costs three
        # times as much, and send reads them for every driver record).
        self.key_serde, self.value_serde = self.key_serde, self.value_serde
        self._kser, self._vser = self.key_serde.serialize, self.value_serde.serialize
        # A record at a time: str keys and int values (words and counts) serialized
        # once each (see remembering_encoder).
        self._kstr = remembering_encoder(self.key_serde, str)
        self._vint = remembering_encoder(self.value_serde, int)
        self.round_robin_none_keys = self.round_robin_none_keys

    def send(self, batch: Batch) -> None:
        """Serialize the batch, choose each record's queue and hand it to the producer
        (a record that does not serialize follows the on_error policy)."""
        n = len(batch.values)
        if not n:
            return
        self.records_out += n
        if n == 1 and self._send_chosen is None:
            h = batch.headers[0] if batch.headers else ()
            self._send_record(batch.keys[0], batch.values[0], batch.timestamps[0], h, batch)
            return
        try:
            kbs, vbs = serialize_rows(
                self.key_serde,
                self.value_serde,
                batch.keys,
                batch.values,
                self.round_robin_none_keys,
            )
        except Exception:
            batch, kbs, vbs = self._serialize_one_by_one(batch)  # applies on_error
            if not kbs:
                return
        nq = self.queues
        # One round-robin turn per batch: keyless records of one batch stay together.
        # (A topic of one queue has nothing to choose. The columns are not copied: a
        # batch is never changed once made.)
        qs = 0 if nq == 1 else self.route(kbs, nq, next(self._round_robin) % nq)
        if self._send_chosen is not None:
            self._send_chosen(batch, qs, kbs, vbs)
            return
        self._send(self.topic, qs, batch.timestamps, kbs, vbs, batch.headers or [()] * len(kbs))

    def _send_record(
        self, k: Any, v: Any, ts: int, h: Headers, batch: Batch | tuple[str, int]
    ) -> None:
        """:meth:`send` of one record (the test driver's every record): the same bytes
        to the same queue, with no columns built, handed to ``Producer.send``. ``batch``:
        the batch of it, or its (topic, offset), to name it should it not serialize."""
        kb: bytes | None
        try:
            if type(k) is str:
                kb = self._kstr(k)
            else:
                kb = None if k is None and self.round_robin_none_keys else self._kser(k)
            vb = self._vint(v) if type(v) is int else None if v is None else self._vser(v)
        except Exception:
            if type(batch) is tuple:
                topic, offset = batch
                batch = Batch(topic, self.ctx.queue, [k], [v], [ts], [offset], [h] if h else None)
            assert isinstance(batch, Batch)
            batch, kbs, vbs = self._serialize_one_by_one(batch)  # applies on_error
            if not kbs:
                return
            kb, vb = kbs[0], vbs[0]
        nq = self.queues
        # (an int: route gives one queue for one record)
        q: Any = 0 if nq == 1 else self.route([kb], nq, next(self._round_robin) % nq)
        self._send_one(self.topic, q, kb, vb, ts, h)

    def one(self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int) -> None:
        if self._send_chosen is not None:
            Processor.one(self, key, value, ts, headers, topic, offset)
            return
        self.records_in += 1
        self.records_out += 1
        self._send_record(key, value, ts, headers, (topic, offset))

    #: A sink's processing is its send (no frame in between: every record passes here).
    #: Subclasses that do more before sending override ``process``.
    process = send

    def _serialize_one_by_one(self, batch: Batch) -> tuple[Batch, list[Any], list[Any]]:
        """The rows that serialize and their keys and values as bytes; the others
        follow the on_error policy."""
        kser, vser = self.key_serde.serialize, self.value_serde.serialize
        none_rr = self.round_robin_none_keys
        kbs: list[Any] = []
        vbs: list[Any] = []
        keep: list[int] = []
        for i, (k, v) in enumerate(zip(batch.keys, batch.values)):
            try:
                kb = None if k is None and none_rr else kser(k)
                vb = None if v is None else vser(v)
            except SerdeError as e:
                self.ctx.handle_error(self.name, batch.row(i), e)
                continue
            kbs.append(kb)
            vbs.append(vb)
            keep.append(i)
        return batch.take(keep), kbs, vbs


@register_processor("sink", BUILDERS)
class SinkProcessor(_SinkBase):
    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        assert isinstance(factory.node, n.SinkNode)
        self.key_serde = factory.node.key_serde
        self.value_serde = factory.node.value_serde


@register_processor("shuffle-sink", BUILDERS)
class ShuffleSinkProcessor(_SinkBase):
    """Writes to a shuffle topic; for count/sum/min/max, writes partial aggregates and,
    when combining is on, merges them per key until the task's next commit."""

    key_serde = INTERNAL_SERDE
    value_serde = INTERNAL_SERDE
    # A None key is serialized (msgpack b"\xc0") and hashed like any other key; only a
    # join receives such records (in front of an aggregation they are dropped here).
    round_robin_none_keys = False

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        node = factory.node
        self.partials = bool(factory.options.get("partials"))
        # In front of an aggregation, a None key is dropped here rather than behind the
        # shuffle: a combined partial would count many skipped records as one.
        self.skip_null_keys = isinstance(node, (n.AggregateNode, n.WindowAggregateNode))
        # The partial is computed here with the aggregation's function: report its
        # failures under the aggregation's step name, which is what the user wrote.
        self.fn_step = node.name
        if self.partials:
            assert isinstance(node, n.AggregateNode)
            self.agg = Aggregation.of(node)
            self.op = node.op
            self.to_partial, self.merge = self.agg.to_partial, self.agg.merge
            self.user_fn = node.fn

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        self.combine = ctx.config.combine
        self.max_keys = ctx.config.cache_entries
        # The partials combined since the last flush (the commit), per key; the latest
        # timestamp and the last source offset they combine.
        self._acc: dict[Any, Any] = {}
        self._max_ts: int | None = None
        self._origin: tuple[str, int, int] = ("", 0, 0)
        # Tells one queue of the topic the task's time (see send); None: not needed.
        self._tell = ctx.tell.get(self.topic)
        self._slack = ctx.told_slack.get(self.topic, 0)
        if self._tell is not None:
            self._send_chosen = self._send_telling

    def process(self, batch: Batch) -> None:
        if self.partials and self.combine and self.op == "count":
            self._count_into(batch)  # (drops None keys itself, with no scan for one)
            return
        if self.skip_null_keys:
            batch = self.without_null_keys(batch)
            if not batch.values:
                return
        if not self.partials:
            self.send(batch)
            return
        if self.op == "count":
            if not self._count_words(batch):
                self.send(batch.with_values([1] * len(batch)))
            return
        if self.to_partial is not None:
            values, batch = apply_column(
                self.ctx, self.fn_step, self.to_partial, self.user_fn, batch
            )
            batch = batch.with_values(values)
        if self.combine:
            self._combine(batch, *self._merge(batch))
        else:
            self.send(batch)

    def send(self, batch: Batch) -> None:
        if not batch.values:
            return
        # The task's watermark follows what it has sent: moved after the send, which
        # (_send_telling) compares each record's timestamp with it.
        ts = batch.max_timestamp
        super().send(batch)
        if ts > self.ctx.out_time:
            self.ctx.out_time = ts

    def one(self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int) -> None:
        # process() of a batch of one (combined and told sends are left to it).
        if (self.partials and self.combine) or self._send_chosen is not None:
            Processor.one(self, key, value, ts, headers, topic, offset)
            return
        self.records_in += 1
        if key is None and self.skip_null_keys:
            self.ctx.metrics[NULL_KEYS] += 1
            return
        if self.partials:
            if self.op == "count":
                value = 1
            elif self.to_partial is not None:
                try:
                    value = self.to_partial(value)
                except Exception as e:
                    record = (key, value, ts, headers, topic, offset)
                    self.failed_one(self.fn_step, record, e, self.user_fn)
                    return
        self.records_out += 1
        self._send_record(key, value, ts, headers, (topic, offset))
        if ts > self.ctx.out_time:
            self.ctx.out_time = ts

    def _count_words(self, batch: Batch) -> bool:
        """:meth:`send` of a count's partials (1 each) for a batch of str keys (a line's
        words, in the test driver), their bytes remembered (see _SinkBase.init); False
        (nothing sent) for other keys, or one that does not serialize."""
        keys = batch.keys
        if self._send_chosen is not None or set(map(type, keys)) != {str}:
            return False
        try:
            kbs: list[bytes | None] = list(map(self._kstr, keys))
        except Exception:
            return False
        n = len(kbs)
        self.records_out += n
        nq = self.queues
        qs = 0 if nq == 1 else self.route(kbs, nq, next(self._round_robin) % nq)
        self._send(self.topic, qs, batch.timestamps, kbs, [self._vint(1)] * n,
                   batch.headers or [()] * n)  # fmt: skip
        ts = batch.max_timestamp
        if ts > self.ctx.out_time:
            self.ctx.out_time = ts
        return True

    def _send_telling(self, batch: Batch, qs: Any, kbs: list[Any], vbs: list[Any]) -> None:
        """Send ``batch``, whose queues are chosen (``qs``), telling the queue of a record
        behind the task's time that time first (see watermarks.send_told)."""
        assert self._tell is not None
        tell, send, topic = self._tell, self._send, self.topic
        timestamps = batch.timestamps
        headers = batch.headers or [()] * len(kbs)

        def send_part(start: int, stop: int) -> None:
            if start == 0 and stop == len(kbs):
                send(topic, qs, timestamps, kbs, vbs, headers)
            elif stop > start:
                part = qs if isinstance(qs, int) else qs[start:stop]
                send(
                    topic, part, timestamps[start:stop], kbs[start:stop], vbs[start:stop],
                    headers[start:stop],
                )  # fmt: skip

        # By the time this task sent to this topic: a batch goes to each shuffle sink in
        # turn, and what an earlier one sent of it is no time of this step's yet.
        told = self.ctx.told_time
        top = send_told(timestamps, told.get(topic, NO_TIME), send_part, tell, self._slack, qs)
        if top > told.get(topic, NO_TIME):
            told[topic] = top
        self.ctx.out_time = max(self.ctx.out_time, top)

    def _count_into(self, batch: Batch) -> None:
        """Count the batch's keys straight into the interval's counts (a C loop). A None
        key is counted too, then taken out: the counts never keep one, so a batch without
        one costs no scan of its keys to find out."""
        acc, keys = self._acc, batch.keys
        try:
            _count_elements(acc, keys)
        except TypeError:
            # An unhashable key: the keys before it were counted; take them out again
            # and count the batch the slow way.
            for k in keys[: next(i for i, k in enumerate(keys) if not _hashable(k))]:
                acc[k] -= 1
                if not acc[k]:
                    del acc[k]
            batch = self.without_null_keys(batch)
            if batch.values:
                self._count_slowly(batch)
            return
        if None in acc:
            del acc[None]
            batch = self.without_null_keys(batch)  # (counts them as skipped)
            if not batch.values:
                return
        self._noted(batch)

    def _count_slowly(self, batch: Batch) -> None:
        """:meth:`_count_into` of a batch with an unhashable key (and no None key)."""
        keys = batch.keys
        try:
            _count_elements(self._acc, keys)
        except TypeError:
            # An unhashable key: the keys before it were counted; the rest goes through
            # the record-by-record path, which reports the bad ones.
            i = next(i for i, k in enumerate(keys) if not _hashable(k))
            rest = batch.take(list(range(i, len(keys))))
            self._combine(rest, *self._merge(rest.with_values([1] * len(rest))))
        self._noted(batch)

    def _merge(self, batch: Batch) -> tuple[list[Any], list[Any]]:
        acc: dict[Any, Any] = {}
        get, merge = acc.get, self.merge
        for i, (k, v) in enumerate(zip(batch.keys, batch.values)):
            try:
                old = get(k, _MISSING)
                acc[k] = v if old is _MISSING else merge(old, v)
            except Exception as e:
                self.ctx.handle_error(self.fn_step, batch.row(i), e, self.user_fn)
        return list(acc), list(acc.values())

    def _combine(self, batch: Batch, keys: list[Any], values: list[Any]) -> None:
        """Fold a batch's partials into those of the commit interval (map-side combine
        over the interval: output of a task becomes visible at its commit anyway)."""
        if not keys:
            return
        acc = self._acc
        merged: dict[Any, Any] = {}  # keys are distinct within a batch: no chaining
        try:
            self.agg.fold_partials(merged, acc.get, keys, values)
        except Exception:
            # Partials of different batches that do not merge: send what came before
            # as it is, start over with this batch; the aggregation reports the failure.
            self.flush()
            merged = dict(zip(keys, values))
        acc.update(merged)
        self._noted(batch)

    def _noted(self, batch: Batch) -> None:
        # A combined record stands for many: it carries the latest timestamp of the
        # records combined since the last flush and the last source offset combined.
        ts = batch.max_timestamp
        if self._max_ts is None or ts > self._max_ts:
            self._max_ts = ts
        self._origin = (batch.topic, batch.queue, batch.last_offset)
        if len(self._acc) >= self.max_keys:
            self.flush()

    @property
    def holds(self) -> bool:
        return self.combine

    def held(self) -> int:
        return len(self._acc)

    def flush(self) -> None:
        if not self._acc:
            return
        keys, values = list(self._acc), list(self._acc.values())
        topic, queue, offset = self._origin
        n_ = len(keys)
        ts = self._max_ts if self._max_ts is not None else 0
        self._acc.clear()
        self._max_ts = None
        self.send(Batch(topic, queue, keys, values, [ts] * n_, [offset] * n_))
