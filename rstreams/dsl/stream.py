"""The fluent DSL: StreamBuilder, RStream, GroupedStream, WindowStream and RTable.

Each method adds one immutable node to the builder's pipeline and returns a *new*
wrapper; wrappers never change, so one stream can feed several chains (branching).

    >>> import re
    >>> from rstreams import StreamBuilder
    >>> b = StreamBuilder("wordcount")
    >>> (b.source("sentences")
    ...    .flatMap(lambda line: re.findall(r"\\w+", line.lower()))
    ...    .keyBy(lambda w: w)
    ...    .count()
    ...    .toRStream()
    ...    .sink("word-counts"))
    >>> topology = b.build()
    >>> [s.name for s in topology.stores.values()]
    ['wordcount-sentences-count-3-store']
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

from rstreams.dsl import nodes as n
from rstreams.dsl.checks import check_fn, check_queues, check_same_sink_topic, check_topic
from rstreams.dsl.external import RedisStream, external_topic
from rstreams.dsl.windows import (
    HoppingWindow,
    JoinWindow,
    SessionWindow,
    TumblingWindow,
    Window,
    to_ms,
)
from rstreams.errors import (
    MissingKeyError,
    TopologyError,
)
from rstreams.serde import SerdeLike, get_serde
from rstreams.userfn import describe_fn as describe_fn  # re-exported: its old home

if TYPE_CHECKING:
    from rstreams.planner.topology import Topology

__all__ = [
    "GroupedStream",
    "JoinedStream",
    "RStream",
    "RTable",
    "StreamBuilder",
    "StreamTable",
    "WindowStream",
]


class StreamBuilder:
    """Entry point of the DSL: holds one pipeline (logical graph) for one job.

    Args:
        job_id: stable id of the job; prefixes every internal topic and state store, so
            keep it when you redeploy a job whose state you want to keep.

    >>> b = StreamBuilder("clicks")
    >>> clicks = b.source("clicks", deserializer="json")
    >>> clicks.filter(lambda c: c["ok"]).sink("good-clicks")
    >>> print(b.build().describe().splitlines()[0])
    Topology: clicks
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = n.check_name(job_id, "the job id")
        self.pipeline = n.Pipeline(job_id)

    def source(
        self,
        topic: str | RedisStream,
        deserializer: SerdeLike | None = None,
        *,
        key_deserializer: SerdeLike | None = None,
        queues: int | None = None,
        external: RedisStream | None = None,
    ) -> RStream:
        """Read a topic. Values are UTF-8 text unless ``deserializer`` says otherwise
        ("str", "bytes", "json", "msgpack", a Serde, or a function of bytes).

        ``queues`` declares the topic's queue count when known; shuffles default to it.
        A :class:`~rstreams.dsl.external.RedisStream` (as ``topic``, named after its
        stream, or as ``external=``) reads a stream other programs write; a stream of all
        fields (``value=None``) is read as JSON unless ``deserializer`` says otherwise.
        """
        topic, external = external_topic(topic, external, "source")
        check_topic(topic, "a source topic", external)
        if external is not None and external.value is None and deserializer is None:
            deserializer = "json"  # the ingest writes the entry's fields as a JSON object
        if topic in self.pipeline.sources:
            raise TopologyError(
                f"topic {topic!r} is already read by source step "
                f"{self.pipeline.sources[topic].name!r}; reuse that stream to branch instead"
            )
        node = self.pipeline.add(
            n.SourceNode,
            (),
            None,
            topic=topic,
            value_serde=get_serde(deserializer),
            key_serde=get_serde(key_deserializer),
            queues=check_queues(queues, "source"),
            external=external,
        )
        self.pipeline.sources[topic] = node
        # An external stream's entries are copied round-robin over the topic's queues (a
        # chunk and its position in one append): keyed steps shuffle them by key first.
        return RStream(self, node, repartition=external is not None)

    def build(self) -> Topology:
        """Compile the pipeline into a :class:`~rstreams.planner.topology.Topology`."""
        # Resolved at call time so that importing the DSL never imports the planner.
        from rstreams.planner.compiler import compile_pipeline

        return compile_pipeline(self.pipeline)

    def __repr__(self) -> str:
        return f"StreamBuilder({self.job_id!r}, steps={len(self.pipeline.nodes)})"


class _Stream:
    __slots__ = ("_builder", "_node", "_repartition")

    def __init__(self, builder: StreamBuilder, node: n.Node, repartition: bool = False) -> None:
        self._builder = builder
        self._node = node
        self._repartition = repartition

    @property
    def node(self) -> n.Node:
        """The logical node this stream wraps."""
        return self._node

    def _add(self, cls: type[n.Node], name: str | None, **fields: Any) -> Any:
        return self._builder.pipeline.add(cls, (self._node,), name, **fields)


class _Sinkable(_Stream):
    """Keyed streams and tables: ``sink`` is ``toRStream().sink``."""

    __slots__ = ()

    def toRStream(self, *, name: str | None = None) -> RStream:
        raise NotImplementedError

    def sink(
        self,
        topic: str | RedisStream,
        serializer: SerdeLike | None = None,
        *,
        key_serializer: SerdeLike | None = None,
        queues: int | None = None,
        name: str | None = None,
        external: RedisStream | None = None,
    ) -> None:
        """Shorthand for ``.toRStream().sink(...)``."""
        self.toRStream().sink(
            topic, serializer, key_serializer=key_serializer, queues=queues, name=name,
            external=external,
        )  # fmt: skip


class RStream(_Stream):
    """A stream of records (key, value, timestamp). Immutable; every method returns a new
    stream (or None for terminal steps)."""

    __slots__ = ()

    def _next(self, cls: type[n.Node], name: str | None, **fields: Any) -> RStream:
        return RStream(self._builder, self._add(cls, name, **fields), self._repartition)

    def map(self, fn: Callable[[Any], Any], *, name: str | None = None) -> RStream:
        """Replace each value with ``fn(value)``; the key is kept.

        >>> b = StreamBuilder("j"); b.source("in").map(str.upper).sink("out")
        """
        return self._next(n.MapNode, name, fn=check_fn(fn, "map"))

    def flatMap(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None) -> RStream:
        """Replace each value with zero or more values: the items of ``fn(value)``."""
        return self._next(n.FlatMapNode, name, fn=check_fn(fn, "flatMap"))

    def filter(self, fn: Callable[[Any], bool], *, name: str | None = None) -> RStream:
        """Keep the records whose value makes ``fn(value)`` true."""
        return self._next(n.FilterNode, name, fn=check_fn(fn, "filter"))

    def peek(self, fn: Callable[[Any], Any], *, name: str | None = None) -> RStream:
        """Call ``fn(value)`` for its side effect and pass the record on unchanged."""
        return self._next(n.PeekNode, name, fn=check_fn(fn, "peek"))

    def selectTimestamp(self, fn: Callable[[Any], int], *, name: str | None = None) -> RStream:
        """Set each record's timestamp (epoch milliseconds) to ``fn(value)``."""
        return self._next(n.SelectTimestampNode, name, fn=check_fn(fn, "selectTimestamp"))

    def foreach(self, fn: Callable[[Any], Any], *, name: str | None = None) -> None:
        """Terminal step: call ``fn(value)`` for each record."""
        self._add(n.ForeachNode, name, fn=check_fn(fn, "foreach"))

    def print(self, label: str | None = None, *, name: str | None = None) -> None:
        """Terminal step: print ``[label] key: value`` for each record to stdout."""
        self._add(n.PrintNode, name, label=label)

    def keyBy(self, fn: Callable[[Any], Any], *, name: str | None = None) -> GroupedStream:
        """Set each record's key to ``fn(value)`` and group by it.

        The key change only marks the stream as needing a shuffle; the planner puts the
        shuffle right before the aggregation that needs co-located keys.
        """
        node = self._add(n.KeyByNode, name, fn=check_fn(fn, "keyBy"))
        return GroupedStream(self._builder, node, repartition=True)

    def groupByKey(self) -> GroupedStream:
        """Group by the record's existing key (no shuffle unless the key was changed)."""
        return GroupedStream(self._builder, self._node, repartition=self._repartition)

    def merge(self, *others: RStream, name: str | None = None) -> RStream:
        """One stream with the records of this stream and of ``others`` (a union)."""
        if not others:
            raise TopologyError("merge() needs at least one other stream")
        for o in others:
            if not isinstance(o, RStream):
                raise TopologyError(f"merge() expects RStream arguments; got {type(o).__name__}")
            if o._builder is not self._builder:
                raise TopologyError("merge() can only join streams of the same StreamBuilder")
        parents = (self._node, *(o._node for o in others))
        if len({p.id for p in parents}) != len(parents):
            raise TopologyError("merge() was given the same stream twice")
        node = self._builder.pipeline.add(n.MergeNode, parents, name)
        return RStream(self._builder, node, any(s._repartition for s in (self, *others)))

    union = merge

    def sink(
        self,
        topic: str | RedisStream,
        serializer: SerdeLike | None = None,
        *,
        key_serializer: SerdeLike | None = None,
        queues: int | None = None,
        name: str | None = None,
        external: RedisStream | None = None,
    ) -> None:
        """Terminal step: write records to ``topic`` (values as JSON unless
        ``serializer`` says otherwise; the queue is mmh3(key) % queues).

        A :class:`~rstreams.dsl.external.RedisStream` (as ``topic``, named after its
        stream, or as ``external=``) also writes each record as an entry of a stream
        other programs read, its key and value as fields.
        """
        topic, external = external_topic(topic, external, "sink")
        if not topic:
            raise TopologyError("sink() needs a topic name; got an empty one")
        check_topic(topic, "a sink topic", external)
        fields = {
            "value_serde": get_serde(serializer, default="json", role="serializer"),
            "key_serde": get_serde(key_serializer, default="json", role="serializer"),
            "queues": check_queues(queues, "sink"),
        }
        check_same_sink_topic(self._builder.pipeline, topic, fields)
        self._add(n.SinkNode, name, topic=topic, external=external, **fields)

    def _joined(self, other: RStream | StreamTable, join_type: str,
                emits: str = "LR") -> JoinedStream:  # fmt: skip
        if isinstance(other, StreamTable):
            other, emits = other._stream, emits.replace("R", "")
        if not isinstance(other, RStream):
            raise TopologyError(
                f"join() expects an RStream or a StreamTable (stream.toTable()); "
                f"got {type(other).__name__} instead"
            )
        if other._builder is not self._builder:
            raise TopologyError("join() can only join streams of the same StreamBuilder")
        if other._node is self._node:
            raise TopologyError("join() was given the same stream on both sides")
        if not emits:
            raise TopologyError(
                "join() of two tables: a join of two streams without window already is "
                "the join of their versioned tables (drop the .toTable() calls)"
            )
        return JoinedStream(self, other, join_type, emits=emits)

    def toTable(self) -> StreamTable:
        """This stream read as a table, for the side of a join: its records are the
        versions of their keys (by event time); they are stored, and only the other
        side's records produce results (a stream-table join, as Kafka Streams'
        ``KStream.join(KTable)``): an order meets its customer's version as of the
        order's time, and a later customer update emits nothing.

        >>> b = StreamBuilder("enrich")
        >>> orders, customers = b.source("orders", "json"), b.source("customers", "json")
        >>> (orders.leftJoin(customers.toTable())
        ...     .where(lambda o: o["customer"]).equalTo(lambda c: c["id"])
        ...     .apply(lambda o, c: {**o, "tier": c and c["tier"]})
        ...     .sink("enriched"))
        >>> for line in b.build().describe().splitlines():
        ...     if "[join]" in line:
        ...         print(line.split("] (")[1].split(")")[0])
        left stream-table join, right side a table, grace=0 ms, ttl=86400000 ms
        """
        return StreamTable(self)

    def join(self, other: RStream | StreamTable) -> JoinedStream:
        """Inner join with ``other``: ``.where(left_key).equalTo(right_key)``, optionally
        ``.window(JoinWindow(before, after))``, then ``.apply(joiner)``.

        >>> from rstreams.dsl.windows import JoinWindow
        >>> b = StreamBuilder("shop")
        >>> orders, payments = b.source("orders", "json"), b.source("payments", "json")
        >>> paid = (orders.join(payments)
        ...     .where(lambda o: o["id"]).equalTo(lambda p: p["order"])
        ...     .window(JoinWindow(before=0, after=60_000))
        ...     .apply(lambda o, p: {"order": o["id"], "amount": p["amount"]}))
        >>> paid.sink("paid-orders")

        Without a window, a temporal join on event time: each record meets the other
        side's latest version of its key as of its own timestamp (ties by position in
        the input), answered once stream time passes its timestamp + ``grace``; see
        :meth:`JoinedStream.apply` and ``docs/windows.md``. ``other.toTable()`` makes
        the other side a table that only stores (:meth:`toTable`).
        """
        return self._joined(other, "inner")

    def leftJoin(self, other: RStream | StreamTable) -> JoinedStream:
        """Like :meth:`join`, and left records without a match are emitted as
        ``joiner(left, None)`` once their window closes."""
        return self._joined(other, "left")

    def outerJoin(self, other: RStream | StreamTable) -> JoinedStream:
        """Like :meth:`leftJoin`, and right records without a match are emitted as
        ``joiner(None, right)`` once their window closes."""
        return self._joined(other, "outer")

    def __getattr__(self, attr: str) -> Any:
        if attr in n.AGGREGATIONS or attr == "window":
            raise MissingKeyError(
                f"{attr}() needs a key: call .keyBy(fn) (or .groupByKey()) before .{attr}()"
            )
        raise AttributeError(f"'RStream' object has no attribute {attr!r}")

    def __repr__(self) -> str:
        return f"RStream({self._node.name!r})"


class _Aggregations(_Sinkable):
    """The aggregations shared by :class:`GroupedStream` and :class:`WindowStream`.

    Each adds one stateful step and returns its :class:`RTable`; the subclass says which
    node that step is (:meth:`_aggregation`). ``aggregate`` is defined by each subclass
    (windows take a ``merger``) on top of the shared :meth:`_aggregate`.
    """

    __slots__ = ()

    def _aggregation(
        self, merger: Callable[[Any, Any], Any] | None
    ) -> tuple[type[n.Node], dict[str, Any]]:
        """The node class of this stream's aggregations and its fields beyond the
        common ones (op, fn, initializer, repartition, queues, state_serde)."""
        raise NotImplementedError

    def _agg(
        self,
        op: str,
        name: str | None,
        queues: int | None,
        fn: Callable[..., Any] | None = None,
        initializer: Callable[[], Any] | None = None,
        merger: Callable[[Any, Any], Any] | None = None,
        serde: SerdeLike | None = None,
    ) -> RTable:
        cls, fields = self._aggregation(merger)
        node = self._add(
            cls,
            name,
            op=op,
            fn=fn,
            initializer=initializer,
            repartition=self._repartition,
            queues=check_queues(queues, op),
            state_serde=None if serde is None else get_serde(serde, role="serializer"),
            **fields,
        )
        return RTable(self._builder, node)

    def count(self, *, name: str | None = None, queues: int | None = None) -> RTable:
        """Number of records per key (per key and window after ``.window(...)``).

        >>> from rstreams.testing import TopologyTestDriver
        >>> b = StreamBuilder("c")
        >>> b.source("in").keyBy(lambda v: v).count().sink("out")
        >>> with TopologyTestDriver(b.build()) as d:
        ...     for v in ["a", "b", "a"]: d.pipe("in", v)
        ...     [(r.key, r.value) for r in d.read("out")]
        [('a', 1), ('b', 1), ('a', 2)]
        """
        return self._agg("count", name, queues)

    def sum(
        self,
        fn: Callable[[Any], Any] | None = None,
        *,
        name: str | None = None,
        queues: int | None = None,
    ) -> RTable:
        """Sum of ``fn(value)`` (or of the value) per key (and window).

        >>> b = StreamBuilder("s")
        >>> b.source("in", "json").keyBy(lambda o: o["user"]).sum(lambda o: o["amount"])
        RTable('in-sum-2')
        """
        return self._agg("sum", name, queues, check_fn(fn, "sum", optional=True))

    def min(
        self,
        fn: Callable[[Any], Any] | None = None,
        *,
        name: str | None = None,
        queues: int | None = None,
    ) -> RTable:
        """Smallest ``fn(value)`` (or value) seen per key (and window)."""
        return self._agg("min", name, queues, check_fn(fn, "min", optional=True))

    def max(
        self,
        fn: Callable[[Any], Any] | None = None,
        *,
        name: str | None = None,
        queues: int | None = None,
    ) -> RTable:
        """Largest ``fn(value)`` (or value) seen per key (and window)."""
        return self._agg("max", name, queues, check_fn(fn, "max", optional=True))

    def reduce(
        self, fn: Callable[[Any, Any], Any], *, name: str | None = None, queues: int | None = None
    ) -> RTable:
        """``acc = fn(acc, value)`` per key (and window), starting from the key's first
        value. Session windows also merge two sessions with it: make it associative."""
        return self._agg(
            "reduce", name, queues, check_fn(fn, "reduce", called_with=("acc", "value"))
        )

    def _aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any], Any],
        merger: Callable[[Any, Any], Any] | None,
        name: str | None,
        queues: int | None,
        serde: SerdeLike | None,
    ) -> RTable:
        return self._agg(
            "aggregate",
            name,
            queues,
            check_fn(adder, "aggregate", "adder", called_with=("acc", "value")),
            check_fn(initializer, "aggregate", "initializer", called_with=()),
            check_fn(merger, "aggregate", "merger", optional=True, called_with=("acc1", "acc2")),
            serde,
        )


class GroupedStream(_Aggregations):
    """A keyed stream. Its aggregations (count, sum, min, max, reduce, aggregate) keep
    their state in a store named ``<job>-<step>-store``, emit an update per input record
    and return the :class:`RTable` of their latest value per key.
    """

    __slots__ = ()

    def _aggregation(
        self, merger: Callable[[Any, Any], Any] | None
    ) -> tuple[type[n.Node], dict[str, Any]]:
        return n.AggregateNode, {}

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any], Any],
        *,
        name: str | None = None,
        queues: int | None = None,
        serde: SerdeLike | None = None,
    ) -> RTable:
        """``acc = adder(acc, value)`` per key, starting from ``initializer()``.

        The accumulator is stored with ``serde`` (msgpack by default: plain Python
        types, tuples included).

        >>> b = StreamBuilder("a")
        >>> (b.source("in").keyBy(len)
        ...    .aggregate(lambda: (0, 0), lambda acc, v: (acc[0] + 1, acc[1] + len(v)))
        ...    .toRStream()
        ...    .map(lambda acc: acc[1] / acc[0])
        ...    .sink("mean-length"))
        """
        return self._aggregate(initializer, adder, None, name, queues, serde)

    def toRStream(self, *, name: str | None = None) -> RStream:
        """The keyed records themselves, as a stream (no step is added)."""
        return RStream(self._builder, self._node, self._repartition)

    def window(
        self,
        spec: Window,
        *,
        emit: str = "update",
        close_after_idle: int | datetime.timedelta | None = None,
    ) -> WindowStream:
        """Aggregate per key and per window of event time.

        ``spec`` is a TumblingWindow, HoppingWindow (SlidingWindow) or SessionWindow.
        ``emit="update"`` emits every update (key ``Windowed(key, start, end)``);
        ``emit="close"`` emits one final result per window when stream time passes its
        end plus grace, or after ``close_after_idle`` (ms or timedelta) of wall clock
        without updates. Records too late for every window go to ``.late()`` of the
        aggregation's table.

        >>> from rstreams.dsl.windows import TumblingWindow
        >>> b = StreamBuilder("w")
        >>> per_minute = b.source("in").keyBy(lambda v: v).window(TumblingWindow(60_000)).count()
        >>> per_minute.sink("counts")
        >>> per_minute.late().sink("too-late")
        """
        if not isinstance(spec, (TumblingWindow, HoppingWindow, SessionWindow)):
            raise TopologyError(
                "window() expects a TumblingWindow, HoppingWindow or SessionWindow; "
                f"got {type(spec).__name__} instead"
            )
        if emit not in ("update", "close"):
            raise TopologyError(f"window(emit=...) must be 'update' or 'close'; got {emit!r}")
        idle = None if close_after_idle is None else to_ms(close_after_idle, "close_after_idle")
        if idle is not None and emit != "close":
            raise TopologyError("close_after_idle only applies with emit='close'")
        return WindowStream(self._builder, self._node, self._repartition, spec, emit, idle)

    def __repr__(self) -> str:
        return f"GroupedStream({self._node.name!r})"


class WindowStream(_Aggregations):
    """A keyed stream cut into windows; its aggregations return an :class:`RTable` of
    results keyed by ``Windowed(key, start, end)``."""

    __slots__ = ("_emit", "_idle", "_spec")

    def __init__(
        self,
        builder: StreamBuilder,
        node: n.Node,
        repartition: bool,
        spec: Window,
        emit: str = "update",
        idle: int | None = None,
    ) -> None:
        super().__init__(builder, node, repartition)
        self._spec = spec
        self._emit = emit
        self._idle = idle

    @property
    def aggregated(self) -> bool:
        """Always False: an aggregation of a WindowStream is an :class:`RTable`."""
        return isinstance(self._node, n.WindowAggregateNode)

    def _aggregation(
        self, merger: Callable[[Any, Any], Any] | None
    ) -> tuple[type[n.Node], dict[str, Any]]:
        fields = {
            "window": self._spec, "merger": merger, "emit": self._emit,
            "close_after_idle": self._idle,
        }  # fmt: skip
        return n.WindowAggregateNode, fields

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any], Any],
        merger: Callable[[Any, Any], Any] | None = None,
        *,
        name: str | None = None,
        queues: int | None = None,
        serde: SerdeLike | None = None,
    ) -> RTable:
        """``acc = adder(acc, value)`` per key per window from ``initializer()``; session
        windows also need ``merger(acc1, acc2)`` to merge two sessions.

        >>> from rstreams.dsl.windows import SessionWindow
        >>> b = StreamBuilder("sessions")
        >>> (b.source("clicks").keyBy(lambda v: v).window(SessionWindow(30_000))
        ...    .aggregate(list, lambda acc, v: acc + [v], lambda a, c: a + c)
        ...    .sink("sessions"))
        """
        if isinstance(self._spec, SessionWindow) and merger is None:
            raise TopologyError("aggregate() over session windows needs merger= to merge sessions")
        return self._aggregate(initializer, adder, merger, name, queues, serde)

    def _require_aggregated(self, what: str) -> NoReturn:
        raise TopologyError(f"{what}() needs an aggregation first, e.g. .window(...).count()")

    def toRStream(self, *, name: str | None = None) -> RStream:
        """Refused: a window has results only after an aggregation, whose
        :class:`RTable` has ``toRStream()``."""
        self._require_aggregated("toRStream")

    def late(self, *, name: str | None = None) -> RStream:
        """Refused: ``late()`` is on the :class:`RTable` of a window aggregation."""
        self._require_aggregated("late")

    def __repr__(self) -> str:
        return f"WindowStream({self._node.name!r}, {self._spec!r})"


#: Methods an aggregation's table refuses with a hint (a second grouping needs a stream).
_REGROUP = (*n.AGGREGATIONS, "window", "keyBy", "groupByKey")


class RTable(_Sinkable):
    """The table of an aggregation: its latest value per key (per ``Windowed(key, start,
    end)`` for a windowed aggregation), returned by count, sum, min, max, reduce and
    aggregate of a :class:`GroupedStream` or :class:`WindowStream`.

    A table is read as the stream of its updates (:meth:`toRStream`) or written to a
    topic (:meth:`sink`). It cannot be aggregated again: counting a table's update
    events is rarely what is meant, so re-key its stream explicitly first.

    >>> from rstreams.testing import TopologyTestDriver
    >>> b = StreamBuilder("t")
    >>> counts = b.source("in").keyBy(lambda v: v).count()
    >>> counts
    RTable('in-count-2')
    >>> counts.sink("counts")
    >>> counts.toRStream().filter(lambda c: c > 1).sink("repeated")
    >>> counts.count()
    Traceback (most recent call last):
    ...
    rstreams.errors.MissingKeyError: count() on 'in-count-2': ...
    >>> with TopologyTestDriver(b.build()) as d:
    ...     for v in ["a", "b", "a"]: d.pipe("in", v)
    ...     [r.value for r in d.read("counts")], [r.key for r in d.read("repeated")]
    ([1, 1, 2], ['a'])
    """

    __slots__ = ()

    def __init__(self, builder: StreamBuilder, node: n.Node) -> None:
        super().__init__(builder, node, False)

    @property
    def windowed(self) -> bool:
        """True for the table of a window aggregation (keys are ``Windowed``)."""
        return isinstance(self._node, n.WindowAggregateNode)

    def toRStream(self, *, name: str | None = None) -> RStream:
        """The stream of this table's updates: ``(key, new value)`` per update, keyed by
        ``Windowed(key, start, end)`` for a window aggregation."""
        return RStream(self._builder, self._add(n.ToRStreamNode, name), False)

    def late(self, *, name: str | None = None) -> RStream:
        """The records that came too late for every window they belong to (window
        aggregations only)."""
        if not self.windowed:
            raise TopologyError(
                f"late() on {self._node.name!r}: only a window aggregation has late records"
            )
        return RStream(self._builder, self._add(n.LateNode, name), False)

    if not TYPE_CHECKING:  # type checkers report these as missing attributes instead

        def __getattr__(self, attr: str) -> Any:
            step = object.__getattribute__(self, "_node").name
            if attr in _REGROUP:
                raise MissingKeyError(
                    f"{attr}() on {step!r}: that step is an aggregation, and its result is "
                    f"a table (RTable), not a keyed stream; to {attr} its updates, call "
                    f".toRStream().keyBy(fn) (or .toRStream().groupByKey()) first"
                )
            if hasattr(RStream, attr) and not attr.startswith("_"):
                raise AttributeError(
                    f"'RTable' object has no attribute {attr!r}: {step!r} is an "
                    f"aggregation's table; call .toRStream().{attr}(...) on its updates"
                )
            raise AttributeError(f"'RTable' object has no attribute {attr!r}")

    def __repr__(self) -> str:
        return f"RTable({self._node.name!r})"


#: How long a version of a join without window stays valid (event time).
DEFAULT_JOIN_TTL = 24 * 3600 * 1000


class StreamTable:
    """A stream read as a versioned table (:meth:`RStream.toTable`): the side of a join
    whose records are only stored. Joined on the left (``table.join(stream)``), the
    right side's records are the ones that produce results."""

    __slots__ = ("_stream",)

    def __init__(self, stream: RStream) -> None:
        self._stream = stream

    def join(self, other: RStream) -> JoinedStream:
        """Inner stream-table join, the table on the left: see :meth:`RStream.join`."""
        return self._stream._joined(other, "inner", emits="R")

    def leftJoin(self, other: RStream) -> JoinedStream:
        """Left join, the table on the left: a table version with no match emits nothing
        (only the right side emits), so this is an inner join; use
        ``stream.leftJoin(table)`` for the stream's unmatched records."""
        return self._stream._joined(other, "left", emits="R")

    def toRStream(self) -> RStream:
        """The stream this table was made of."""
        return self._stream

    def __repr__(self) -> str:
        return f"StreamTable({self._stream._node.name!r})"


class JoinedStream:
    """A join being described: ``.where(fn).equalTo(fn)[.window(JoinWindow)].apply(fn)``.
    Immutable like the streams: every call returns a new JoinedStream."""

    __slots__ = (
        "_emits", "_join_type", "_left", "_left_key", "_right", "_right_key", "_window",
    )  # fmt: skip

    def __init__(
        self,
        left: RStream,
        right: RStream,
        join_type: str,
        left_key: Any = None,
        right_key: Any = None,
        window: Any = None,
        emits: str = "LR",
    ) -> None:
        self._left, self._right, self._join_type = left, right, join_type
        self._left_key, self._right_key, self._window = left_key, right_key, window
        self._emits = emits

    def _with(self, **changes: Any) -> JoinedStream:
        fields = {
            "left_key": self._left_key, "right_key": self._right_key, "window": self._window,
            "emits": self._emits,
        }  # fmt: skip
        fields.update(changes)
        return JoinedStream(self._left, self._right, self._join_type, **fields)

    def where(self, fn: Callable[[Any], Any]) -> JoinedStream:
        """The key of a left record: ``fn(left_value)``."""
        return self._with(left_key=check_fn(fn, "where"))

    def equalTo(self, fn: Callable[[Any], Any]) -> JoinedStream:
        """The key of a right record: ``fn(right_value)``."""
        return self._with(right_key=check_fn(fn, "equalTo"))

    def window(self, spec: JoinWindow) -> JoinedStream:
        """Join records whose timestamps are close (see JoinWindow)."""
        if not isinstance(spec, JoinWindow):
            raise TopologyError(f"a join window must be a JoinWindow; got {type(spec).__name__}")
        if self._emits != "LR":
            raise TopologyError("a windowed join joins two streams; drop .toTable() or the window")
        return self._with(window=spec)

    def apply(
        self,
        joiner: Callable[[Any, Any], Any],
        *,
        name: str | None = None,
        ttl: int | datetime.timedelta | None = None,
        grace: int | datetime.timedelta | None = None,
        queues: int | None = None,
    ) -> RStream:
        """The joined stream: ``joiner(left_value, right_value)`` per match (one side
        None for unmatched records of left/outer joins).

        Without a window (a temporal join): ``ttl`` is how long a version stays valid
        in event time (default 24 h): a record meets a version at most that much older
        than itself. ``grace`` (default 0) is how far out of order the input may be: a
        record is answered once stream time passes its timestamp + grace, and a record
        later than that is late (joined at once with what is retained, not stored).
        Results come out in (timestamp, position) order, each with its record's
        timestamp. Without ``toTable()`` both sides emit: the gold record would also
        give ``(1, 'gold')``, the latest order as of its time with the new tier (a join
        of two versioned tables).

        >>> from rstreams.testing import TopologyTestDriver
        >>> b = StreamBuilder("tiers")
        >>> orders, tiers = b.source("orders", "json"), b.source("tiers", "json")
        >>> (orders.leftJoin(tiers.toTable())
        ...     .where(lambda o: o["user"]).equalTo(lambda t: t["user"])
        ...     .apply(lambda o, t: (o["id"], t and t["tier"]))
        ...     .sink("out"))
        >>> with TopologyTestDriver(b.build()) as driver:
        ...     driver.pipe("tiers", {"user": "ann", "tier": "silver"}, timestamp=10)
        ...     driver.pipe("orders", {"id": 1, "user": "ann"}, timestamp=15)
        ...     driver.pipe("tiers", {"user": "ann", "tier": "gold"}, timestamp=20)
        ...     driver.pipe("orders", {"id": 2, "user": "ann"}, timestamp=20)
        ...     driver.end_of_input()
        ...     print(driver.read_values("out"))
        [[1, 'silver'], [2, 'gold']]
        """
        if self._left_key is None or self._right_key is None:
            missing = "where(fn)" if self._left_key is None else "equalTo(fn)"
            raise TopologyError(
                f"join ... apply() needs {missing} first: the join key of each side"
            )
        if ttl is not None and self._window is not None:
            raise TopologyError(
                "ttl= is for joins without window; a windowed join expires by its window"
            )
        if grace is not None and self._window is not None:
            raise TopologyError(
                "grace= is for joins without window; give a windowed join's grace to its "
                "JoinWindow(..., grace=...)"
            )
        grace_ms = 0 if grace is None else to_ms(grace, "grace")
        left = self._left
        node = left._builder.pipeline.add(
            n.JoinNode,
            (left._node, self._right._node),
            name,
            join_type=self._join_type,
            left_key=self._left_key,
            right_key=self._right_key,
            joiner=check_fn(joiner, "apply", "joiner", called_with=("left", "right")),
            window=self._window,
            ttl=(DEFAULT_JOIN_TTL if ttl is None else to_ms(ttl, "ttl"))
            if self._window is None
            else None,
            queues=check_queues(queues, "join"),
            grace=grace_ms,
            emits=self._emits,
        )
        return RStream(left._builder, node, False)
