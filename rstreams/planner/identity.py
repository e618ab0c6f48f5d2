"""The identity of a topology: the facts that decide where its state lives and how it
is read (steps, internal topics, stores), as plain data that survives a trip through
JSON. :mod:`rstreams.planner.diff` compares two of them."""

from __future__ import annotations

import functools
import hashlib
import json
import types
from typing import TYPE_CHECKING, Any

import attrs

from rstreams.serde import Serde
from rstreams.userfn import describe_fn

if TYPE_CHECKING:
    from rstreams.dsl.nodes import Node
    from rstreams.planner.topology import Topology

__all__ = [
    "FORMAT",
    "OPAQUE",
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
    "reads": {global: value hash}}``: the fingerprint covers the code and closed-over
    values, not where it is, so moving a lambda keeps it; ``reads`` the module globals it
    reads (see :func:`global_reads`).
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


def fingerprint(fn: Any) -> str:
    """A short hash of what ``fn`` computes: its code, constants, names, defaults and
    closed-over values, but not its file, line or local names, so a function that only
    moved in its file keeps its fingerprint.

    >>> fingerprint(lambda w: w) == fingerprint(lambda x: x)
    True
    >>> fingerprint(lambda w: w) == fingerprint(lambda w: w.lower())
    False
    """
    return hashlib.sha256(json.dumps(_fn_key(fn)).encode()).hexdigest()[:16]


def _fn_key(fn: Any, seen: frozenset[int] = frozenset()) -> Any:
    fn = getattr(fn, "__func__", fn)  # a bound method: its function
    if id(fn) in seen:  # a function that calls itself through its closure
        return "<recursive>"
    seen = seen | {id(fn)}
    if isinstance(fn, functools.partial):
        return ["partial", _fn_key(fn.func, seen), [_value_key(a, seen) for a in fn.args]]
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        text = repr(fn)  # built-ins (str.split, F.lower()) have a stable repr
        return text if " at 0x" not in text else f"{type(fn).__module__}.{type(fn).__qualname__}"
    cells = [_value_key(c.cell_contents, seen) for c in fn.__closure__ or ()]
    defaults = [_value_key(v, seen) for v in getattr(fn, "__defaults__", None) or ()]
    return [_code_key(code, seen), cells, defaults]


def _code_key(code: types.CodeType, seen: frozenset[int]) -> Any:
    consts = [
        _code_key(c, seen) if isinstance(c, types.CodeType) else _value_key(c, seen)
        for c in code.co_consts
    ]
    return [code.co_code.hex(), list(code.co_names), consts]


def _value_key(value: Any, seen: frozenset[int]) -> Any:
    if isinstance(value, (frozenset, set)):  # (iteration order varies between processes)
        return sorted(repr(v) for v in value)
    if callable(value) and not isinstance(value, type):
        return _fn_key(value, seen)
    text = repr(value)
    return text if " at 0x" not in text else type(value).__qualname__


#: How :func:`global_reads` marks a global whose value can not be compared: an object
#: whose repr is its address, e.g. ``"opaque Config"``.
OPAQUE = "opaque"


def global_reads(fn: Any) -> dict[str, str]:
    """The module globals ``fn`` reads, each with a short hash of its value: what a
    lambda computes depends on them (``WORD.findall(line)`` with another ``WORD`` is
    another tokenizer). Functions it reads count with their own code and globals; the
    functions it closes over or takes as defaults add what they read (``cell.name``).

    A value is compared by its repr (a set's sorted), a module by its name, a class by its
    qualified name, a plain object whose repr is only its address by its attributes; one
    without attributes to compare (``__slots__``, a C object, an attribute that is itself
    opaque) can not be compared: its entry is ``"opaque <type>"`` and diffs say so.

    >>> import re, threading
    >>> WORD = re.compile(r"\\w+")
    >>> sorted(global_reads(lambda line: WORD.findall(line)))
    ['WORD']
    >>> LOCK = threading.Lock()
    >>> global_reads(lambda line: LOCK)["LOCK"]
    'opaque lock'
    """
    out: dict[str, str] = {}
    _reads(fn, "", out, frozenset())
    return dict(sorted(out.items()))


def _reads(fn: Any, prefix: str, out: dict[str, str], seen: frozenset[int]) -> None:
    fn = getattr(fn, "__func__", fn)
    if id(fn) in seen:
        return
    seen = seen | {id(fn)}
    if isinstance(fn, functools.partial):
        _reads(fn.func, prefix, out, seen)
        return
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return
    names = getattr(fn, "__globals__", {})
    for name in sorted(_code_names(code)):
        if name in names:
            out[prefix + name] = _global_key(names[name], seen)
    for var, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # (an empty cell)
            continue
        if callable(value) and not isinstance(value, type):
            _reads(value, f"{prefix}{var}.", out, seen)
    for i, value in enumerate(getattr(fn, "__defaults__", None) or ()):
        if callable(value) and not isinstance(value, type):
            _reads(value, f"{prefix}default{i}.", out, seen)


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _global_key(value: Any, seen: frozenset[int]) -> str:
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, type):
        return f"class {value.__module__}.{value.__qualname__}"
    if callable(value):
        nested: dict[str, str] = {}
        _reads(value, "", nested, seen)
        key: Any = [_fn_key(value, seen), nested]
    else:
        key = _value_key(value, seen)
        if isinstance(key, str) and key == type(value).__qualname__ and " at 0x" in repr(value):
            # A plain object (its repr is its address) compares by its attributes.
            attributes = getattr(value, "__dict__", None)
            if not isinstance(attributes, dict) or not attributes:
                return f"{OPAQUE} {type(value).__qualname__}"
            parts = {k: _global_key(v, seen | {id(value)}) for k, v in sorted(attributes.items())}
            if any(v.startswith(OPAQUE) for v in parts.values()) or id(value) in seen:
                return f"{OPAQUE} {type(value).__qualname__}"
            key = [f"{type(value).__module__}.{type(value).__qualname__}", parts]
    return hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()[:12]
