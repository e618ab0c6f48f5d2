"""The physical topology: plain data describing processors, topics and state stores.

A :class:`Topology` is what ``StreamBuilder.build()`` returns. It is pure description;
``describe()`` (text) and ``to_dot()``/``render()`` (graphviz) are separate renderers of
it, and the runtime turns it into live processors per queue through
:meth:`ProcessorFactory.build` (phase 3 of the build), with the registry of processor
builders it hands in: the planner knows no runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rstreams.dsl.nodes import Node, Pipeline, SinkNode, SourceNode
from rstreams.errors import UnsupportedOperation
from rstreams.serde import Serde

if TYPE_CHECKING:
    from rstreams.planner.diff import TopologyDiff

#: Queue count of shuffle topics whose upstream queue count is not known at build time.
DEFAULT_SHUFFLE_QUEUES = 8

#: A function building a fresh processor for a factory.
ProcessorBuilder = Callable[["ProcessorFactory"], Any]
#: What a runtime hands to :meth:`SubTopology.build`: factory kind -> processor builder.
#: The planner only describes; which class executes a kind is the runtime's business.
ProcessorRegistry = Mapping[str, ProcessorBuilder]


def register_processor(
    kind: str, registry: dict[str, ProcessorBuilder]
) -> Callable[[ProcessorBuilder], Any]:
    """Decorator a runtime uses to put how to build processors of ``kind`` in its
    ``registry`` (which it later hands to :meth:`SubTopology.build`)."""

    def deco(builder: ProcessorBuilder) -> Any:
        registry[kind] = builder
        return builder

    return deco


@attrs.frozen
class TopicSpec:
    """A topic the topology reads or writes.

    ``role`` is one of ``source``, ``sink``, ``shuffle`` (internal, written by a shuffle
    sink and read by a shuffle source) or ``changelog`` (internal, compacted).
    ``queues`` is None when the queue count is decided by whoever creates the topic.
    """

    name: str
    role: str
    queues: int | None
    key_serde: Serde
    value_serde: Serde

    @property
    def internal(self) -> bool:
        return self.role in ("shuffle", "changelog")

    @property
    def compacted(self) -> bool:
        return self.role == "changelog"


@attrs.frozen
class StoreSpec:
    """A keyed state store owned by one processor; one instance exists per queue."""

    name: str
    processor: str
    changelog_topic: str
    #: The topic whose queues the store is split by (changelog queue q <-> that queue q).
    input_topic: str
    queues: int | None
    serde: Serde


@attrs.define(eq=False)
class ProcessorFactory:
    """Builds the processor of one step; the runtime calls :meth:`build` once per queue.

    ``kind`` names the processor type (``source``, ``map``, ``flatMap``, ``filter``,
    ``foreach``, ``peek``, ``selectTimestamp``, ``keyBy``, ``print``, ``merge``,
    ``toRStream``, ``aggregate``, ``sink``, ``shuffle-sink``, ``shuffle-source``).
    """

    name: str
    kind: str
    node: Node
    parents: list[str] = attrs.field(factory=list)
    children: list[str] = attrs.field(factory=list)
    topic: str | None = None
    stores: list[str] = attrs.field(factory=list)
    subtopology: int = -1
    #: Kind-specific settings, e.g. ``partials``: the shuffle in front of a
    #: count/sum/min/max carries partial aggregates (so it may combine them).
    options: dict[str, Any] = attrs.field(factory=dict)

    @property
    def role(self) -> str:
        """``source``, ``sink`` or ``processor``, for describe and rendering."""
        if self.kind in ("source", "shuffle-source"):
            return "source"
        if self.kind in ("sink", "shuffle-sink"):
            return "sink"
        return "processor"

    @property
    def label(self) -> str:
        """What the step does, for people: the aggregation for ``aggregate`` factories."""
        return self.node.kind if self.kind == "aggregate" else self.kind

    def build(self, registry: ProcessorRegistry) -> Any:
        """A fresh, unlinked processor for this step (a new object on every call), made
        by the builder ``registry`` (the runtime's) has for its kind."""
        try:
            builder = registry[self.kind]
        except KeyError:
            raise UnsupportedOperation(
                f"no processor for step {self.name!r} of kind {self.kind!r} on the embedded engine"
            ) from None
        return builder(self)


@attrs.define(eq=False)
class SubTopology:
    """Processors connected without crossing a topic; one task per queue runs them."""

    id: int
    factories: list[ProcessorFactory]

    @property
    def source_topics(self) -> list[str]:
        return [f.topic for f in self.factories if f.role == "source" and f.topic]

    @property
    def sink_topics(self) -> list[str]:
        return [f.topic for f in self.factories if f.role == "sink" and f.topic]

    @property
    def stores(self) -> list[str]:
        return [s for f in self.factories for s in f.stores]

    def build(self, registry: ProcessorRegistry) -> dict[str, Any]:
        """Phase 3: fresh processors for one queue, linked parent -> children, made by
        the runtime's ``registry`` of processor builders.

        Returns the processors by step name; sources are the entry points.
        """
        procs = {f.name: f.build(registry) for f in self.factories}
        for f in self.factories:
            procs[f.name].link([procs[c] for c in f.children])
        return procs


@attrs.define(eq=False)
class Topology:
    """The compiled pipeline: sub-topologies, topics and state stores.

    >>> from rstreams import StreamBuilder
    >>> b = StreamBuilder("wc")
    >>> b.source("lines").flatMap(str.split).keyBy(lambda w: w).count().sink("counts")
    >>> t = b.build()
    >>> [st.id for st in t.subtopologies]
    [0, 1]
    >>> sorted(name for name, spec in t.topics.items() if spec.internal)
    ['wc-lines-count-3-changelog', 'wc-lines-count-3-shuffle']
    """

    job_id: str
    subtopologies: list[SubTopology]
    topics: dict[str, TopicSpec]
    stores: dict[str, StoreSpec]
    factories: dict[str, ProcessorFactory]
    #: The logical graph it was compiled from (other backends compile that instead).
    pipeline: Pipeline | None = None

    @property
    def source_topics(self) -> list[str]:
        """User topics the topology reads (not internal ones)."""
        return [t.name for t in self.topics.values() if t.role == "source"]

    @property
    def sink_topics(self) -> list[str]:
        """User topics the topology writes (not internal ones)."""
        return [t.name for t in self.topics.values() if t.role == "sink"]

    @property
    def external_sources(self) -> dict[str, Any]:
        """Source topics copied from a stream other programs write: topic -> its
        :class:`~rstreams.dsl.external.RedisStream`."""
        return self._externals(SourceNode)

    @property
    def external_sinks(self) -> dict[str, Any]:
        """Sink topics copied to a stream other programs read: topic -> its
        :class:`~rstreams.dsl.external.RedisStream`."""
        return self._externals(SinkNode)

    def _externals(self, cls: type[SourceNode | SinkNode]) -> dict[str, Any]:
        nodes = self.pipeline.nodes if self.pipeline is not None else ()
        return {
            node.topic: node.external
            for node in nodes
            if isinstance(node, cls) and node.external is not None
        }

    def subtopology_of_topic(self, topic: str) -> list[SubTopology]:
        return [st for st in self.subtopologies if topic in st.source_topics]

    def describe(self) -> str:
        """Text description: sub-topologies with their sources, processors (and their
        stores) and sinks with edges, then the topics and the stores."""
        from rstreams.planner.describe import describe_text

        return describe_text(self)

    def diff(self, other: Topology) -> TopologyDiff:
        """What changes from this topology to ``other`` (a later version of the job), and
        which state that would lose or misread: see :mod:`rstreams.planner.diff`.

        >>> from rstreams import StreamBuilder
        >>> old, new = StreamBuilder("j"), StreamBuilder("j")
        >>> old.source("in").keyBy(str).count().sink("out")
        >>> new.source("in").filter(bool).keyBy(str).count().sink("out")  # count moves
        >>> print(old.build().diff(new.build()).describe().splitlines()[-1])
          State: would be lost or misread: 1 store(s) lost
        """
        from rstreams.planner.diff import diff

        return diff(self, other)

    def to_dot(self) -> str:
        """Graphviz DOT source of the topology (sub-topologies drawn as clusters)."""
        from rstreams.planner.render import to_dot

        return to_dot(self)

    def render(self, path: str | Path, format: str | None = None) -> Path:
        """Write a picture of the topology to ``path`` (``.svg``, ``.png``, ``.pdf`` or
        ``.dot``) with graphviz; returns the path written."""
        from rstreams.planner.render import render

        return render(self, path, format)

    def _repr_svg_(self) -> str:
        from rstreams.planner.render import to_svg

        return to_svg(self)

    def __repr__(self) -> str:
        return (
            f"Topology({self.job_id!r}, subtopologies={len(self.subtopologies)}, "
            f"processors={len(self.factories)}, stores={len(self.stores)})"
        )
