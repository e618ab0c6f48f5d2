"""The identity of a topology: the facts that decide where its state lives and how it
is read (steps, internal topics, stores), as plain data that survives a trip through
JSON. :mod:`rstreams.planner.diff` compares two of them. The facts of each step function
(fingerprint, what it reads) come from :mod:`rstreams.planner.fnfacts`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from rstreams.planner.fnfacts import OPAQUE, READS_FORMAT, fingerprint, global_reads
from rstreams.serde import Serde
from rstreams.userfn import describe_fn

if TYPE_CHECKING:
    from rstreams.dsl.nodes import Node
    from rstreams.planner.topology import Topology

__all__ = [
    "FORMAT",
    "OPAQUE",
    "READS_FORMAT",
    "StepFacts",
    "StoreFacts",
    "TopicFacts",
    "TopologyIdentity",
    "fingerprint",
    "global_reads",
    "identity",
]

#: Version of the JSON written by :meth:`TopologyIdentity.to_json`.
FORMAT = 1

_NODE_IDENTITY = {"id", "name", "parents", "user_named", "chain", "depth"}


@attrs.frozen
class StepFacts:
    """One step of the pipeline as the user wrote it (shuffle parts are not steps).

    ``params`` holds the step's settings (topic, op, window, queues, serdes...) and
    ``fns`` its functions as ``{"label": "name (file:line)", "code": fingerprint,
    "reads": {name: value hash}, "reads_format": READS_FORMAT}``: the fingerprint covers
    the code and closed-over values, not where it is, so moving a lambda keeps it;
    ``reads`` what else it reads (module globals, closed-over values, defaults...) by
    value, ``"opaque <type>"`` for what has no comparable form (see
    :func:`global_reads`).
    """

    name: str
    kind: str
    user_named: bool
    parents: tuple[str, ...]
    chain: str
    depth: int
    params: dict[str, Any] = attrs.field(factory=dict)
    fns: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    @property
    def signature(self) -> str:
        """What the step does, without where it is: equal for a step that only moved."""
        code = {k: [v["code"], v.get("reads")] for k, v in self.fns.items()}
        return json.dumps([self.kind, self.params, code], sort_keys=True, default=str)

    @property
    def method(self) -> str:
        """The DSL method that takes this step's ``name=`` (for hints)."""
        if self.kind == "join":
            return "apply"
        if self.kind.startswith("window") and len(self.kind) > 6:
            return self.kind[6].lower() + self.kind[7:]
        return self.kind


@attrs.frozen
class TopicFacts:
    """A topic; ``step`` is the step an internal topic belongs to (None for user topics)."""

    name: str
    role: str
    queues: int | None
    key_serde: str
    value_serde: str
    step: str | None = None


@attrs.frozen
class StoreFacts:
    """A state store: what decides how its bytes are found and read."""

    name: str
    step: str
    kind: str
    serde: str
    queues: int | None
    changelog: str
    input_topic: str
    window: dict[str, Any] | None = None


@attrs.frozen
class TopologyIdentity:
    """The identity-relevant facts of a topology, as plain data (see :func:`identity`).

    >>> from rstreams import StreamBuilder
    >>> b = StreamBuilder("wc")
    >>> b.source("lines").keyBy(str).count().sink("counts")
    >>> ident = identity(b.build())
    >>> [s.name for s in ident.steps]
    ['source-lines', 'lines-keyBy-1', 'lines-count-2', 'lines-toRStream-3', 'lines-sink-4']
    >>> TopologyIdentity.from_json(ident.to_json()) == ident
    True
    """

    job_id: str
    steps: tuple[StepFacts, ...]
    topics: tuple[TopicFacts, ...]
    stores: tuple[StoreFacts, ...]

    def to_json(self) -> str:
        """The facts as a JSON document (what a job keeps as ``topology.json``)."""
        doc = {"format": FORMAT, **attrs.asdict(self)}
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TopologyIdentity:
        """Read :meth:`to_json`'s output; ``ValueError`` names what is wrong with it."""
        try:
            doc = json.loads(text)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT}")
            return cls(
                doc["job_id"],
                tuple(StepFacts(**{**s, "parents": tuple(s["parents"])}) for s in doc["steps"]),
                tuple(TopicFacts(**t) for t in doc["topics"]),
                tuple(StoreFacts(**s) for s in doc["stores"]),
            )
        except (AttributeError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"not a topology description: {type(e).__name__}: {e}") from e


def identity(topology: Topology) -> TopologyIdentity:
    """The facts of ``topology`` that decide where its state lives and how it is read."""
    steps = [
        _step(f.node) for f in topology.factories.values() if f.name == f.node.name
    ]  # (the other factories are a step's shuffle parts)
    shuffle_owner = {
        f.topic: f.node.name for f in topology.factories.values() if f.kind == "shuffle-source"
    }
    store_of = {s.changelog_topic: s.processor for s in topology.stores.values()}
    topics = [
        TopicFacts(
            t.name,
            t.role,
            t.queues,
            _serde(t.key_serde),
            _serde(t.value_serde),
            shuffle_owner.get(t.name) or store_of.get(t.name),
        )
        for t in topology.topics.values()
    ]
    stores = []
    for s in topology.stores.values():
        node = topology.factories[s.processor].node
        stores.append(
            StoreFacts(
                s.name,
                s.processor,
                node.kind,
                _serde(s.serde),
                s.queues,
                s.changelog_topic,
                s.input_topic,
                _window(getattr(node, "window", None)),
            )
        )
    return TopologyIdentity(topology.job_id, tuple(steps), tuple(topics), tuple(stores))


def _step(node: Node) -> StepFacts:
    params: dict[str, Any] = {}
    fns: dict[str, dict[str, Any]] = {}
    for field in attrs.fields(type(node)):
        if field.name in _NODE_IDENTITY:
            continue
        value = getattr(node, field.name)
        if isinstance(value, Serde):
            params[field.name] = _serde(value)
        elif callable(value) and not isinstance(value, type):
            fns[field.name] = {
                "label": describe_fn(value),
                "code": fingerprint(value),
                "reads": global_reads(value),
                "reads_format": READS_FORMAT,
            }
        elif attrs.has(type(value)):
            params[field.name] = _window(value)
        else:
            params[field.name] = _plain(value)
    return StepFacts(
        node.name,
        node.kind,
        node.user_named,
        tuple(p.name for p in node.parents),
        node.chain,
        node.depth,
        params,
        fns,
    )


def _serde(serde: Serde) -> str:
    name = getattr(serde, "name", None)
    if type(serde).__module__ == "rstreams.serde" and isinstance(name, str):
        return name
    return f"{type(serde).__module__}.{type(serde).__qualname__}"


def _window(window: Any) -> dict[str, Any] | None:
    if window is None:
        return None
    fields = attrs.asdict(window) if attrs.has(type(window)) else {"repr": repr(window)}
    return {"type": type(window).__name__, **fields}


def _plain(value: Any) -> Any:
    """A JSON value standing for ``value`` (its repr when it is not one already)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)
