"""Logical pipeline -> physical Topology (phase 2 of the build).

One translation function per node type (``functools.singledispatch``); a node type with
no rule fails loudly. Keyed stateful operators split into
``shuffle sink -> internal topic <job>-<step>-shuffle -> shuffle source -> operator``;
sub-topologies are the groups of processors connected without crossing a topic.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Any

import attrs

from rstreams.dsl import nodes as n
from rstreams.errors import TopologyError, UnsupportedOperation
from rstreams.planner.topology import (
    DEFAULT_SHUFFLE_QUEUES,
    ProcessorFactory,
    StoreSpec,
    SubTopology,
    TopicSpec,
    Topology,
)
from rstreams.serde import INTERNAL_SERDE

_PASS_THROUGH_KINDS = {
    n.MapNode: "map",
    n.FlatMapNode: "flatMap",
    n.FilterNode: "filter",
    n.ForeachNode: "foreach",
    n.PeekNode: "peek",
    n.SelectTimestampNode: "selectTimestamp",
    n.KeyByNode: "keyBy",
    n.PrintNode: "print",
    n.MergeNode: "merge",
    n.ToRStreamNode: "toRStream",
}


@attrs.define
class _Build:
    pipeline: n.Pipeline
    factories: dict[str, ProcessorFactory] = attrs.field(factory=dict)
    topics: dict[str, TopicSpec] = attrs.field(factory=dict)
    stores: dict[str, StoreSpec] = attrs.field(factory=dict)
    #: logical node id -> the factory its children attach to
    exit_of: dict[int, str] = attrs.field(factory=dict)

    @property
    def job(self) -> str:
        return self.pipeline.job_id

    def add(self, f: ProcessorFactory, parents: list[str]) -> ProcessorFactory:
        if f.name in self.factories:
            raise TopologyError(
                f"processor name {f.name!r} is used twice; rename the step with name=..."
            )
        self.factories[f.name] = f
        for p in parents:
            f.parents.append(p)
            self.factories[p].children.append(f.name)
        return f

    def add_topic(self, spec: TopicSpec) -> None:
        old = self.topics.get(spec.name)
        if old is None:
            self.topics[spec.name] = spec
            return
        if old.role == spec.role or {old.role, spec.role} == {"source", "sink"}:
            # A topic read and written by the same job: keep it as a source (its
            # queues are what readers see); cycle detection runs later.
            if spec.role == "source":
                self.topics[spec.name] = attrs.evolve(spec, queues=spec.queues or old.queues)
            elif old.role == "sink" and old.queues is None and spec.queues is not None:
                # (several sinks of one topic: the DSL refused queue counts that differ)
                self.topics[spec.name] = attrs.evolve(old, queues=spec.queues)
            return
        raise TopologyError(
            f"topic {spec.name!r} is used as a {old.role} topic and as a {spec.role} topic"
        )

    def parents_of(self, node: n.Node) -> list[str]:
        return [self.exit_of[p.id] for p in node.parents]


@functools.singledispatch
def translate(node: n.Node, build: _Build) -> None:
    raise UnsupportedOperation(
        f"no translation rule for {type(node).__name__} (step {node.name!r}) on the embedded engine"
    )


@translate.register
def _source(node: n.SourceNode, build: _Build) -> None:
    build.add_topic(TopicSpec(node.topic, "source", node.queues, node.key_serde, node.value_serde))
    build.add(ProcessorFactory(node.name, "source", node, topic=node.topic), [])
    build.exit_of[node.id] = node.name


@translate.register
def _fn_like(node: n.FnNode, build: _Build) -> None:
    _pass_through(node, build)


@translate.register(n.PrintNode)
@translate.register(n.MergeNode)
@translate.register(n.ToRStreamNode)
def _pass_through(node: n.Node, build: _Build) -> None:
    kind = _PASS_THROUGH_KINDS.get(type(node))
    if kind is None:
        raise UnsupportedOperation(f"no translation rule for {type(node).__name__}")
    build.add(ProcessorFactory(node.name, kind, node), build.parents_of(node))
    build.exit_of[node.id] = node.name


@translate.register
def _sink(node: n.SinkNode, build: _Build) -> None:
    build.add_topic(TopicSpec(node.topic, "sink", node.queues, node.key_serde, node.value_serde))
    build.add(ProcessorFactory(node.name, "sink", node, topic=node.topic), build.parents_of(node))
    build.exit_of[node.id] = node.name


def _upstream_source_topics(build: _Build, factory_name: str) -> set[str]:
    """Topics read by the sub-topology ``factory_name`` belongs to (walking parents)."""
    seen, stack, topics = set(), [factory_name], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        f = build.factories[name]
        if f.role == "source" and f.topic:
            topics.add(f.topic)
        stack.extend(f.parents)
    return topics


def _keyed_input(
    node: n.Node,
    build: _Build,
    parents: list[str],
    repartition: bool,
    partials: bool = False,
) -> tuple[list[str], str, int | None]:
    """Bring ``parents``' records to a keyed operator: through a shuffle topic when
    needed (after a key change, or when several topics feed the operator, since records
    only meet their key's state on the queue that owns the key). Returns the operator's
    parents, the topic its store is split by, and that topic's queue count."""
    upstream = set().union(*(_upstream_source_topics(build, p) for p in parents))
    repartition = repartition or len(upstream) > 1
    node_queues = getattr(node, "queues", None)
    if not repartition:
        (input_topic,) = upstream
        queues = build.topics[input_topic].queues
        if node_queues is not None and queues is not None and node_queues != queues:
            raise TopologyError(
                f"step {node.name!r} asks for {node_queues} queues but reads topic "
                f"{input_topic!r} with {queues} queues without a shuffle; "
                "drop queues= or keyBy first"
            )
        return parents, input_topic, queues or node_queues
    known = [q for t in upstream if (q := build.topics[t].queues) is not None]
    queues = node_queues or (max(known) if known else DEFAULT_SHUFFLE_QUEUES)
    topic = f"{build.job}-{node.name}-shuffle"
    build.add_topic(TopicSpec(topic, "shuffle", queues, INTERNAL_SERDE, INTERNAL_SERDE))
    sinks = [f"{node.name}-shuffle-sink"] if len(parents) == 1 else [
        f"{node.name}-shuffle-sink-{i}" for i in range(len(parents))
    ]  # fmt: skip
    for sink, parent in zip(sinks, parents):
        build.add(
            ProcessorFactory(
                sink, "shuffle-sink", node, topic=topic, options={"partials": partials}
            ),
            [parent],
        )
    source = f"{node.name}-shuffle-source"
    build.add(ProcessorFactory(source, "shuffle-source", node, topic=topic), [])
    return [source], topic, queues


def _store(node: n.Node, build: _Build, input_topic: str, queues: int | None, serde: Any) -> str:
    store = f"{build.job}-{node.name}-store"
    changelog = f"{build.job}-{node.name}-changelog"
    build.add_topic(TopicSpec(changelog, "changelog", queues, INTERNAL_SERDE, INTERNAL_SERDE))
    build.stores[store] = StoreSpec(
        store, node.name, changelog, input_topic, queues, serde or INTERNAL_SERDE
    )
    return store


@translate.register
def _aggregate(node: n.AggregateNode, build: _Build) -> None:
    partials = node.op in n.COMBINABLE
    parents, topic, queues = _keyed_input(
        node, build, build.parents_of(node), node.repartition, partials
    )
    store = _store(node, build, topic, queues, node.state_serde)
    # Partial aggregates travel only through a shuffle (map-side combine).
    shuffled = build.factories[parents[0]].kind == "shuffle-source"
    options = {"partials": partials and shuffled}
    build.add(
        ProcessorFactory(node.name, "aggregate", node, stores=[store], options=options), parents
    )
    build.exit_of[node.id] = node.name


@translate.register
def _window_aggregate(node: n.WindowAggregateNode, build: _Build) -> None:
    parents, topic, queues = _keyed_input(node, build, build.parents_of(node), node.repartition)
    store = _store(node, build, topic, queues, node.state_serde)
    build.add(ProcessorFactory(node.name, "window-aggregate", node, stores=[store]), parents)
    build.exit_of[node.id] = node.name


@translate.register
def _late(node: n.LateNode, build: _Build) -> None:
    build.add(ProcessorFactory(node.name, "late", node), build.parents_of(node))
    build.exit_of[node.id] = node.name


@translate.register
def _join(node: n.JoinNode, build: _Build) -> None:
    # Both sides are tagged and shuffled into ONE topic, so records with equal join keys
    # always meet in the same task: co-location by construction.
    left, right = build.parents_of(node)
    tags = []
    for side, parent in (("left", left), ("right", right)):
        tag = f"{node.name}-{side}-tag"
        # ``sources``: the source topics in declaration order (a temporal join's tie rule
        # orders records of equal timestamps by topic, then place in it).
        options = {"side": side, "sources": tuple(build.pipeline.sources)}
        build.add(ProcessorFactory(tag, "join-tag", node, options=options), [parent])
        tags.append(tag)
    parents, topic, queues = _keyed_input(node, build, tags, repartition=True)
    store = _store(node, build, topic, queues, None)
    build.add(ProcessorFactory(node.name, "join", node, stores=[store]), parents)
    build.exit_of[node.id] = node.name


def _validate(pipeline: n.Pipeline) -> None:
    if not pipeline.nodes:
        raise TopologyError(
            f"job {pipeline.job_id!r} is an empty topology: add a source with "
            "builder.source(topic) and at least one step after it"
        )
    for node in pipeline.nodes:
        if isinstance(node, n.SourceNode) and not pipeline.children_of(node):
            raise TopologyError(
                f"source step {node.name!r} (topic {node.topic!r}) has no steps after it; "
                "add e.g. .sink(topic) or remove the source"
            )


def _subtopologies(factories: dict[str, ProcessorFactory]) -> list[SubTopology]:
    parent = {name: name for name in factories}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for f in factories.values():
        for c in f.children:
            ra, rb = find(f.name), find(c)
            if ra != rb:
                parent[rb] = ra
    groups: dict[str, list[ProcessorFactory]] = defaultdict(list)
    for f in factories.values():  # creation order: stable numbering
        groups[find(f.name)].append(f)
    result = []
    for i, members in enumerate(groups.values()):
        for f in members:
            f.subtopology = i
        result.append(SubTopology(i, members))
    return result


def _check_cycles(subs: list[SubTopology]) -> None:
    readers: dict[str, list[int]] = defaultdict(list)
    for st in subs:
        for t in st.source_topics:
            readers[t].append(st.id)
    edges = {st.id: {(t, r) for t in st.sink_topics for r in readers.get(t, [])} for st in subs}
    state: dict[int, int] = {}

    def visit(sid: int, path: list[str]) -> None:
        state[sid] = 1
        for topic, nxt in sorted(edges[sid]):
            if state.get(nxt) == 1:
                raise TopologyError(
                    f"the topology has a cycle through topic(s) {' -> '.join([*path, topic])}: "
                    "a step writes to a topic that feeds back into itself"
                )
            if nxt not in state:
                visit(nxt, [*path, topic])
        state[sid] = 2

    for st in subs:
        if st.id not in state:
            visit(st.id, [])


def compile_pipeline(pipeline: n.Pipeline) -> Topology:
    """Compile the logical graph of a StreamBuilder into a Topology."""
    _validate(pipeline)
    build = _Build(pipeline)
    for node in pipeline.nodes:  # creation order is a topological order
        translate(node, build)
    subs = _subtopologies(build.factories)
    _check_cycles(subs)
    return Topology(pipeline.job_id, subs, build.topics, build.stores, build.factories, pipeline)
