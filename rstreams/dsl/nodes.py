"""Logical graph nodes: small immutable records of what the user asked for.

Nodes hold no compile or runtime code; the planner (embedded engine) and the Spark
backend are separate compilers over them. Each node knows its parents; children are
kept by the :class:`Pipeline`, which is the only mutable piece of the logical build.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar

import attrs

from rstreams.errors import DuplicateStepError, TopologyError
from rstreams.serde import Serde

Fn = Callable[..., Any]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_name(name: str, what: str) -> str:
    """Names end up in topic, store and file names, so keep them to a safe alphabet."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise TopologyError(
            f"{what} must be a non-empty string of letters, digits, '.', '_' or '-' "
            f"starting with a letter or digit; got {name!r}"
        )
    return name


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Node:
    """Base of all logical nodes. Identity (not value) equality: two maps with the same
    function at different places are different steps."""

    kind: ClassVar[str] = "node"
    #: True for nodes that need a key and keep state (they get a shuffle in front).
    stateful: ClassVar[bool] = False

    id: int
    name: str
    parents: tuple[Node, ...]
    user_named: bool = False
    #: Naming context: the chain (source topic plus branch suffixes) and depth in it.
    chain: str = ""
    depth: int = 0

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SourceNode(Node):
    kind: ClassVar[str] = "source"
    topic: str
    value_serde: Serde
    key_serde: Serde
    queues: int | None = None
    #: A stream other programs write (a ``RedisStream``), copied into ``topic``.
    external: Any = None


@attrs.frozen(kw_only=True, eq=False, repr=False)
class FnNode(Node):
    """A node that applies one user function per record."""

    fn: Fn


@attrs.frozen(kw_only=True, eq=False, repr=False)
class MapNode(FnNode):
    kind: ClassVar[str] = "map"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class FlatMapNode(FnNode):
    kind: ClassVar[str] = "flatMap"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class FilterNode(FnNode):
    kind: ClassVar[str] = "filter"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ForeachNode(FnNode):
    kind: ClassVar[str] = "foreach"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class PeekNode(FnNode):
    kind: ClassVar[str] = "peek"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SelectTimestampNode(FnNode):
    kind: ClassVar[str] = "selectTimestamp"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class KeyByNode(FnNode):
    kind: ClassVar[str] = "keyBy"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class PrintNode(Node):
    kind: ClassVar[str] = "print"
    label: str | None = None


@attrs.frozen(kw_only=True, eq=False, repr=False)
class MergeNode(Node):
    kind: ClassVar[str] = "merge"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ToRStreamNode(Node):
    kind: ClassVar[str] = "toRStream"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SinkNode(Node):
    kind: ClassVar[str] = "sink"
    topic: str
    value_serde: Serde
    key_serde: Serde
    queues: int | None = None
    #: A stream other programs read (a ``RedisStream``), ``topic`` is copied into.
    external: Any = None


AGGREGATIONS = ("count", "sum", "min", "max", "reduce", "aggregate")
#: Aggregations whose partial results merge associatively (map-side combine applies).
COMBINABLE = frozenset({"count", "sum", "min", "max"})


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AggregateNode(Node):
    """A keyed, stateful aggregation. ``op`` is one of :data:`AGGREGATIONS`.

    ``repartition`` is True when the key was changed upstream (keyBy), so the planner
    must put a shuffle in front of it.
    """

    stateful: ClassVar[bool] = True

    op: str
    fn: Fn | None = None
    initializer: Fn | None = None
    repartition: bool = True
    queues: int | None = None
    state_serde: Serde | None = None

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.op


@attrs.frozen(kw_only=True, eq=False, repr=False)
class WindowAggregateNode(Node):
    """A keyed aggregation per window (tumbling, hopping or session).

    ``emit`` is ``"update"`` (every update) or ``"close"`` (one final result per window
    once stream time passes its end plus grace, or after ``close_after_idle`` ms of wall
    clock without updates).
    """

    stateful: ClassVar[bool] = True

    op: str
    window: Any
    fn: Fn | None = None
    initializer: Fn | None = None
    merger: Fn | None = None
    emit: str = "update"
    close_after_idle: int | None = None
    repartition: bool = True
    queues: int | None = None
    state_serde: Serde | None = None

    @property
    def kind(self) -> str:  # type: ignore[override]
        return f"window{self.op[0].upper()}{self.op[1:]}"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LateNode(Node):
    """The side output of a window aggregation: records too late for every window."""

    kind: ClassVar[str] = "late"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class JoinNode(Node):
    """A join of its two parents (left, right) on key functions.

    With a ``window`` (JoinWindow) records join within a time range; without, a temporal
    join on event time (:mod:`rstreams.semantics.temporal`): each side is versioned by
    timestamp, a record meets the other side's version as of its own time (valid for
    ``ttl`` ms), and is answered once stream time passes its timestamp + ``grace``.
    ``emits`` names the sides whose records produce results ("LR"; "L" or "R" when the
    other side is a table).
    """

    stateful: ClassVar[bool] = True
    kind: ClassVar[str] = "join"

    join_type: str
    left_key: Fn
    right_key: Fn
    joiner: Fn
    window: Any = None
    ttl: int | None = None
    queues: int | None = None
    grace: int = 0
    emits: str = "LR"

    @property
    def join_kind(self) -> str:
        """``windowed``, ``temporal`` (both sides versioned and emitting) or
        ``stream-table`` (one side a table)."""
        if self.window is not None:
            return "windowed"
        return "temporal" if self.emits == "LR" else "stream-table"


@attrs.define
class Pipeline:
    """The logical graph of one StreamBuilder: nodes in creation order plus child edges.

    Step names are given here, at the moment a node is added, from its position:
    ``<chain>-<kind>-<depth>`` where the chain is the source topic, with ``.N`` appended
    where the path takes the N-th (N >= 1) branch of a node. User names (``name=``)
    replace the generated one. Names never depend on a global counter, so editing one
    branch does not rename steps (and so lose the state) of another.
    """

    job_id: str
    nodes: list[Node] = attrs.field(factory=list)
    children: dict[int, list[Node]] = attrs.field(factory=dict)
    by_name: dict[str, Node] = attrs.field(factory=dict)
    sources: dict[str, SourceNode] = attrs.field(factory=dict)

    def add(
        self, cls: type[Node], parents: tuple[Node, ...], name: str | None, **fields: Any
    ) -> Any:
        if name is not None:
            check_name(name, "a step name")
        if parents:
            first = parents[0]
            branch = len(self.children.get(first.id, ()))
            chain = first.chain if branch == 0 else f"{first.chain}.{branch}"
            depth = max(p.depth for p in parents) + 1
        else:
            chain, depth = fields["topic"], 0
        if cls is AggregateNode:
            kind = fields["op"]
        elif cls is WindowAggregateNode:
            kind = f"window{fields['op'][0].upper()}{fields['op'][1:]}"
        else:
            kind = cls.kind
        if name is None:
            generated = f"source-{chain}" if not parents else f"{chain}-{kind}-{depth}"
        else:
            generated = name
        node = cls(
            id=len(self.nodes),
            name=generated,
            parents=parents,
            user_named=name is not None,
            chain=chain,
            depth=depth,
            **fields,
        )
        other = self.by_name.get(node.name)
        if other is not None:
            hint = (
                "do you have two steps with the same name?"
                if node.user_named or other.user_named
                else "give one of them a name with name=..."
            )
            raise DuplicateStepError(
                f"step {node.name!r} ({node.kind}) already exists as a {other.kind} step; {hint}"
            )
        self.nodes.append(node)
        self.by_name[node.name] = node
        self.children[node.id] = []
        for p in parents:
            self.children[p.id].append(node)
        return node

    def children_of(self, node: Node) -> list[Node]:
        return self.children.get(node.id, [])
