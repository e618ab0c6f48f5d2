"""The embedded engine's keyed aggregation (count, sum, min, max, reduce, aggregate): an
adapter of :class:`rstreams.semantics.aggregations.Aggregation` over the task's store.

Behind a shuffle, count/sum/min/max receive *partial aggregates* (see the shuffle sink
in :mod:`.processors`) and merge them into state a batch at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rstreams.dsl import nodes as n
from rstreams.errors import SerdeError, StateStoreError
from rstreams.planner.topology import ProcessorBuilder, ProcessorFactory, register_processor
from rstreams.runtime.engine.operators.batch import Batch
from rstreams.runtime.engine.operators.context import StreamContext
from rstreams.runtime.engine.operators.processors import Processor
from rstreams.runtime.queues.base import Headers
from rstreams.semantics.aggregations import Aggregation
from rstreams.semantics.nullkeys import NULL_KEYS

#: The processor kinds defined here: kind -> builder (see ``operators.registry``).
BUILDERS: dict[str, ProcessorBuilder] = {}


#: The types msgpack (state's default serde) stores.
_STORABLE = (type(None), bool, int, float, str, bytes, bytearray, list, tuple, dict)


def _unstorable_part(obj: Any) -> Any:
    """The first part of ``obj`` msgpack can not store (``obj`` itself if it is one),
    None if every part is storable."""
    if not isinstance(obj, _STORABLE):
        return obj
    if isinstance(obj, (list, tuple)):
        parts: Any = obj
    elif isinstance(obj, dict):
        parts = [p for kv in obj.items() for p in kv]
    else:
        return None
    for p in parts:
        if (bad := _unstorable_part(p)) is not None:
            return bad
    return None


def unstorable(
    step: str, node: n.AggregateNode | n.WindowAggregateNode
) -> Callable[[Any, Any, SerdeError], str | None]:
    """What an aggregation's store says of a value it can not store: the step, the
    user's key (and window), the type that could not be stored and what to use instead
    (for :meth:`MeteredStore.explain_unstorable`)."""
    windowed = isinstance(node, n.WindowAggregateNode)
    size = getattr(getattr(node, "window", None), "size", None)
    call = node.op

    def explain(skey: Any, value: Any, e: SerdeError) -> str | None:
        if not windowed:
            where, acc = f"key {skey!r}", value
        elif (
            isinstance(skey, tuple)
            and len(skey) == 3
            and skey[0] in ("w", "s")
            and isinstance(value, tuple)
            and len(value) == 2
        ):
            _, key, start = skey
            if skey[0] == "w":
                acc, end = value[0], None if size is None else start + size
            else:
                end, acc = value
            where = f"key {key!r}, window [{start}, {end})"
        else:
            return None  # not an aggregate (the store's stream time, say)
        if node.state_serde is None:
            bad = _unstorable_part(acc)
            kind = type(acc if bad is None else bad).__name__
            within = "" if bad is None or bad is acc else f" (in a {type(acc).__name__})"
            if bad is None:  # (an int too large, say)
                within = f" ({e})"
            instead = (
                "a list (sorted(...) for a stable order)"
                if isinstance(bad, (set, frozenset))
                else "None/bool/int/float/str/bytes/list/tuple/dict"
            )
            return (
                f"step {step!r} ({call}) can not store its value for {where}: a {kind}"
                f"{within} can not be stored in state, which holds "
                "None/bool/int/float/str/bytes/list/tuple/dict. Have the "
                f"{'initializer and adder' if node.op == 'aggregate' else 'function'} return "
                f"{instead} instead, or give {call}() a serde= that stores {kind} values"
            )
        return (
            f"step {step!r} ({call}) can not store its value for {where}: its serde "
            f"{getattr(node.state_serde, 'name', node.state_serde)!r} can not store a "
            f"{type(acc).__name__} ({e})"
        )

    return explain


@register_processor("aggregate", BUILDERS)
class AggregateProcessor(Processor):
    """Keyed aggregation over a state store; emits (key, new aggregate) per input record.

    With ``coalesce`` on, only the latest update per key is kept and emitted at flush;
    partial aggregates (count/sum/min/max behind a shuffle) are then merged a batch at a
    time: per key within the batch, then one state read and write per distinct key.
    """

    def __init__(self, factory: ProcessorFactory) -> None:
        super().__init__(factory)
        node = factory.node
        assert isinstance(node, n.AggregateNode)
        self.store_name = factory.stores[0]
        self.agg_node = node
        self.user_fn = node.fn
        self.agg = agg = Aggregation.of(node)
        self.add = agg.adds  # partials merge with +
        self.merge = agg.merge
        self.partials = bool(factory.options.get("partials"))
        self.update = agg.add_partial if self.partials else agg.update
        #: Partials added with ``+``: the store's ``add`` is the update (see one()).
        self.adds_partials = self.partials and agg.adds
        # The coalesced updates: value, timestamp and source offset per key.
        self.pending: dict[Any, Any] = {}
        self.pending_ts: dict[Any, int] = {}
        self.pending_offsets: dict[Any, int] = {}
        self._origin = ("", 0)

    def init(self, ctx: StreamContext) -> None:
        super().init(ctx)
        self.store = ctx.store(self.store_name)
        self.store.explain_unstorable(unstorable(self.name, self.agg_node))
        self.coalesce = ctx.config.coalesce

    def process(self, batch: Batch) -> None:
        if None in batch.keys:  # (the test without a call: every record passes here)
            batch = self.without_null_keys(batch)
        if not batch.values:
            return
        if self.coalesce:
            if self.partials and self._merge_batch(batch):
                return
        elif len(batch.values) == 1:  # the test driver's: one record, one update
            k = batch.keys[0]
            try:
                new = self.update(self.store.get(k), batch.values[0])
                self.store.put(k, new)
            except Exception as e:
                self.ctx.handle_error(self.name, batch.row(0), e, self.user_fn)
                return
            self.forward(batch.with_values([new]))
            return
        get, put, update = self.store.get, self.store.put, self.update
        out: list[Any] = []
        failed: list[int] = []
        for i, (k, v) in enumerate(zip(batch.keys, batch.values)):
            try:
                new = update(get(k), v)
                put(k, new)
            except Exception as e:
                self.ctx.handle_error(self.name, batch.row(i), e, self.user_fn)
                failed.append(i)
                continue
            out.append(new)
        if failed:
            bad = set(failed)
            batch = batch.take([i for i in range(len(batch)) if i not in bad])
        if not self.coalesce:
            self.forward(batch.with_values(out))
            return
        self._remember(batch.keys, out, batch)

    def one(self, key: Any, value: Any, ts: int, headers: Headers, topic: str, offset: int) -> None:
        # process() of a batch of one record, with no batch built (coalesced updates
        # are left to it).
        if self.coalesce:
            Processor.one(self, key, value, ts, headers, topic, offset)
            return
        self.records_in += 1
        if key is None:
            self.ctx.metrics[NULL_KEYS] += 1
            return
        try:
            if self.adds_partials:  # (count and sum: one call)
                new = self.store.add(key, value)
            else:
                new = self.update(self.store.get(key), value)
                self.store.put(key, new)
        except Exception as e:
            self.failed_one(self.name, (key, value, ts, headers, topic, offset), e, self.user_fn)
            return
        self.records_out += 1
        self.next_one(key, new, ts, headers, topic, offset)

    def _merge_batch(self, batch: Batch) -> bool:
        """Merge a batch of partials into state; False (nothing done) if any merge fails,
        so the record-by-record path can apply the error policy."""
        keys, values = batch.keys, batch.values
        try:
            if len(set(keys)) != len(keys):
                keys, values = self._combine(keys, values)
            olds = self.store.get_many(keys)
            if self.add:
                news = [p if o is None else o + p for o, p in zip(olds, values)]
            else:
                merge = self.merge
                news = [p if o is None else merge(o, p) for o, p in zip(olds, values)]
        except StateStoreError:
            raise  # the store's failure, not a record's
        except Exception:
            return False
        self.store.put_many(keys, news)
        self._remember(keys, news, batch)
        return True

    def _combine(self, keys: list[Any], values: list[Any]) -> tuple[list[Any], list[Any]]:
        acc: dict[Any, Any] = {}
        self.agg.fold_partials(acc, acc.get, keys, values)
        return list(acc), list(acc.values())

    def _remember(self, keys: list[Any], values: list[Any], batch: Batch) -> None:
        self.pending.update(zip(keys, values))
        self.pending_ts.update(zip(batch.keys, batch.timestamps))  # the key's last record
        self.pending_offsets.update(zip(batch.keys, batch.offsets))
        self._origin = (batch.topic, batch.queue)

    @property
    def holds(self) -> bool:
        return self.coalesce

    def held(self) -> int:
        return len(self.pending)

    def flush(self) -> None:
        if self.pending:
            keys = list(self.pending)
            values = list(self.pending.values())
            timestamps = list(map(self.pending_ts.__getitem__, keys))
            offsets = list(map(self.pending_offsets.__getitem__, keys))
            self.pending.clear()
            self.pending_ts.clear()
            self.pending_offsets.clear()
            topic, queue = self._origin
            self.forward(Batch(topic, queue, keys, values, timestamps, offsets))
