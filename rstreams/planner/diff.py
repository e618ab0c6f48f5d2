"""What changes between two versions of a pipeline, and which state that loses.

Step, internal topic and store names come from a step's place in its chain (see
docs/concepts.md#step-names), so an edit upstream of an aggregation renames its store,
and a redeployed job would start that store empty. :func:`diff` compares two versions
and says so before a run does it:

- **steps** are matched by name, then, for those left over, by what they do (the same
  kind, functions and parameters) with their parents matched first: a step that only
  moved is *renamed*, not removed and added;
- **stores** are *kept* (same name and facts), *lost* (renamed with their step: the new
  store starts empty, the old state is orphaned), *misread* (same name, but another
  serde, window, queue count, aggregation or input: the old state is read wrongly),
  *added* or *removed*;
- **topics** are matched by name, internal ones also through their step's rename;
- a kept store or sink topic is *stale* when a step that shapes its records was added,
  removed, moved or changed (another function body, other parameters) upstream of it, or
  is its own step: it keeps what the earlier version computed, and a resumed job does not
  read the input it already consumed again, so the change applies to new input only.
  Nothing is lost (the run is allowed), but only ``--fresh`` recomputes it.

A diff compares :class:`TopologyIdentity` values: the facts of a topology that decide
where its state lives and how it is read, as plain data that survives a trip through
JSON (the embedded runtime keeps the last one a job ran with in its directory); they
are made in :mod:`rstreams.planner.identity`. The steps of the two are paired, and the
changes upstream of each step found, by :mod:`rstreams.planner.matching`.

    >>> from rstreams import StreamBuilder
    >>> def wordcount(lowercase: bool, pin: bool):
    ...     b = StreamBuilder("wc")
    ...     words = b.source("lines").flatMap(str.split)
    ...     if lowercase:
    ...         words = words.map(str.lower)
    ...     words.keyBy(str).count(name="counts" if pin else None).sink("out")
    ...     return b.build()
    >>> d = wordcount(False, pin=False).diff(wordcount(True, pin=False))
    >>> d.loses_state
    True
    >>> [(s.old, s.new, s.effect) for s in d.stores]
    [('wc-lines-count-3-store', 'wc-lines-count-4-store', 'lost')]
    >>> pinned = wordcount(False, pin=True).diff(wordcount(True, pin=True))
    >>> pinned.loses_state, pinned.stale
    (False, True)
    >>> [(s.name, s.effect) for s in pinned.stores]
    [('wc-counts-store', 'stale')]
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from rstreams.errors import ConfigError
from rstreams.planner.fnfacts import CLOSURE, DEFAULT, OBJECT, OPAQUE, PARTIAL, READS_FORMAT, SELF
from rstreams.planner.identity import (
    StepFacts,
    StoreFacts,
    TopicFacts,
    TopologyIdentity,
    fingerprint,
    identity,
)
from rstreams.planner.matching import match_steps, upstream_changes

if TYPE_CHECKING:
    from rstreams.planner.topology import Topology

__all__ = [
    "Change",
    "StepFacts",
    "StoreFacts",
    "TopicFacts",
    "TopologyChangeError",
    "TopologyDiff",
    "TopologyIdentity",
    "diff",
    "fingerprint",
    "identity",
    "match_steps",
    "upstream_changes",
]


#: Version of the JSON written by :meth:`TopologyDiff.to_json` (1 had no ``format`` and
#: no ``stale``).
DIFF_FORMAT = 2

#: Effects that make a diff lose state: the old state is orphaned or read wrongly.
LOSSES = ("lost", "misread")

#: The effect on a kept store or sink topic whose content the earlier version computed
#: (a step upstream changed): readable, but the change applies to new input only.
STALE = "stale"


class TopologyChangeError(ConfigError):
    """A run's topology would lose or misread the state an earlier run of the job left
    (``rstreams run`` exits 2 and prints the diff)."""


# -- the diff ------------------------------------------------------------------------------


@attrs.frozen
class Change:
    """One step, topic or store across the two versions.

    ``status`` is ``kept``, ``changed``, ``renamed``, ``added`` or ``removed``;
    ``effect`` is what happens to the data it holds: ``none``, ``lost`` (orphaned under
    the old name), ``misread`` (read with other settings), ``stale`` (kept and read
    right, but computed by the earlier version of a step upstream: the change applies to
    new input only), ``dropped`` (no longer used) or ``new``. ``notes`` say what
    changed; ``hint`` what to do about it; ``causes``, for a stale one, the step changes
    that make it so (``"lines-filter-2 [filter] added"``).
    """

    kind: str
    status: str
    old: str | None
    new: str | None
    effect: str = "none"
    notes: tuple[str, ...] = ()
    hint: str | None = None
    causes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        if self.old and self.new and self.old != self.new:
            return f"{self.old} -> {self.new}"
        return self.old or self.new or "?"


@attrs.frozen
class TopologyDiff:
    """The difference between two versions of a job's topology (see :func:`diff`)."""

    old_job: str
    new_job: str
    steps: tuple[Change, ...]
    topics: tuple[Change, ...]
    stores: tuple[Change, ...]
    #: What could not be compared: values that steps of the new version read with no
    #: comparable form (a library's or C object), and reads recorded by an earlier
    #: rstreams in another form.
    uncompared: tuple[str, ...] = ()
    #: How the job starts over, for the hints (``--fresh``; on Spark, a new checkpoint).
    start_over: str = "--fresh"

    @property
    def loses_state(self) -> bool:
        """True when state (or records a job keeps) would be orphaned or misread."""
        return any(c.effect in LOSSES for c in (*self.topics, *self.stores))

    @property
    def stale(self) -> bool:
        """True when a kept store or sink topic holds what the earlier version computed:
        the change is compatible, but applies to new input only (``--fresh`` recomputes).
        """
        return bool(self.stale_changes)

    @property
    def stale_changes(self) -> tuple[Change, ...]:
        """The sink topics and stores that keep what the earlier version computed."""
        return tuple(c for c in (*self.topics, *self.stores) if c.effect == STALE)

    @property
    def unchanged(self) -> bool:
        """True when nothing but function locations (file:line) differ."""
        return all(c.status == "kept" for c in (*self.steps, *self.topics, *self.stores))

    def describe(self) -> str:
        """The diff as text, in the style of ``Topology.describe()``."""
        return _describe(self)

    def to_dict(self) -> dict[str, Any]:
        """The diff as plain data (what ``rstreams diff --json`` prints)."""
        return {
            "format": DIFF_FORMAT,
            "old_job": self.old_job,
            "new_job": self.new_job,
            "loses_state": self.loses_state,
            "stale": self.stale,
            "steps": [attrs.asdict(c) for c in self.steps],
            "topics": [attrs.asdict(c) for c in self.topics],
            "stores": [attrs.asdict(c) for c in self.stores],
            "uncompared": list(self.uncompared),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def diff(
    old: Topology | TopologyIdentity,
    new: Topology | TopologyIdentity,
    *,
    start_over: str = "--fresh",
) -> TopologyDiff:
    """What changes from ``old`` to ``new``, and which state that loses or misreads, or
    keeps as the old version computed it (stale). ``start_over``: how the job starts over,
    for the hints (``--fresh``; on Spark, a new checkpoint)."""
    a = old if isinstance(old, TopologyIdentity) else identity(old)
    b = new if isinstance(new, TopologyIdentity) else identity(new)
    uncompared = _uncompared(b)
    a, b, compared = _comparable_reads(a, b)
    if not compared:
        uncompared = (*uncompared, _READS_UNRECORDED)
    step_map = match_steps(a.steps, b.steps)
    steps = _step_changes(a, b, step_map)
    topic_map = _match_topics(a, b, step_map)
    topics = _topic_changes(a, b, topic_map, start_over)
    stores = _store_changes(a, b, step_map, topic_map, start_over)
    # A kept store or sink topic is stale when something before it computes differently.
    causes = upstream_changes(a, b, step_map)
    producers: dict[str, list[str]] = {}
    for s in b.steps:
        if s.kind == "sink":
            producers.setdefault(str(s.params.get("topic")), []).append(s.name)
    new_stores = {s.name: s for s in b.stores}
    topics = tuple(
        _stale(c, [w for p in producers.get(c.new, ()) for w in causes[p]], start_over)
        if c.kind == "sink" and c.new is not None
        else c
        for c in topics
    )
    stores = tuple(
        _stale(c, causes[new_stores[c.new].step], start_over) if c.new is not None else c
        for c in stores
    )
    return TopologyDiff(a.job_id, b.job_id, steps, topics, stores, uncompared, start_over)


#: Said when one identity's functions have no ``reads`` of this version (see
#: :func:`_comparable_reads`).
_READS_UNRECORDED = (
    "what the functions read besides their code (module globals, closed-over values, "
    "defaults) was recorded by an earlier rstreams in another form, or not at all: compared "
    "by code only this time"
)


def _comparable_reads(
    a: TopologyIdentity, b: TopologyIdentity
) -> tuple[TopologyIdentity, TopologyIdentity, bool]:
    """An identity recorded before what functions read was part of it (no ``reads``), or
    in another form (another ``reads_format``), compares with the other's without them:
    an upgrade alone changes no step. The flag: whether reads were compared (False only
    when some function of either has reads to drop)."""
    fns = [f for s in (*a.steps, *b.steps) for f in s.fns.values()]
    if all(f.get("reads_format") == READS_FORMAT for f in fns):
        return a, b, True

    def strip(t: TopologyIdentity) -> TopologyIdentity:
        steps = tuple(
            attrs.evolve(
                s,
                fns={
                    k: {n: v for n, v in f.items() if n not in ("reads", "reads_format")}
                    for k, f in s.fns.items()
                },
            )
            for s in t.steps
        )
        return attrs.evolve(t, steps=steps)

    return strip(a), strip(b), not any(f.get("reads") for f in fns)


def _uncompared(b: TopologyIdentity) -> tuple[str, ...]:
    return tuple(
        f"{s.name}: {key} reads {_read_name(name)}, {_a(value[len(OPAQUE) + 1 :])} object: "
        "its value has no comparable form, so a change to it is not seen"
        for s in b.steps
        for key, f in sorted(s.fns.items())
        for name, value in sorted((f.get("reads") or {}).items())
        if str(value).startswith(OPAQUE + " ")
    )


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def _read_name(key: str) -> str:
    """A key of a function's ``reads`` in words: ``global WORD``, ``closed-over value
    shortest``, ``default sep``, ``the object it is bound to``."""
    for suffix, what in ((CLOSURE, "closed-over value"), (DEFAULT, "default")):
        if key.endswith(suffix):
            return f"{what} {key[: -len(suffix)]}"
    if key.startswith(SELF):
        rest = key[len(SELF) :]
        return f"the object it is bound to{f' (its {rest[1:]})' if rest else ''}"
    if key.startswith(OBJECT):
        rest = key[len(OBJECT) :]
        return f"the callable object{f' (its {rest[1:]})' if rest else ''}"
    if key.startswith(PARTIAL):
        return f"its partial arguments{key[len(PARTIAL) :]}"
    return f"global {key}"


def _stale(change: Change, causes: Iterable[str], start_over: str) -> Change:
    """``change`` marked stale when ``causes`` changed what it holds (unless it is lost,
    misread or new already)."""
    causes = list(dict.fromkeys(causes))
    if not causes or change.effect != "none":
        return change
    note = (
        f"holds what the earlier version computed (what changed: {', '.join(causes)}); "
        "this version applies to new input only: input already consumed is not read again"
    )
    return attrs.evolve(
        change,
        effect=STALE,
        notes=(*change.notes, note),
        causes=tuple(causes),
        hint=(
            "to recompute it from all input with this version, start the job over with "
            + start_over
        ),
    )


def _step_changes(
    a: TopologyIdentity, b: TopologyIdentity, step_map: dict[str, str]
) -> tuple[Change, ...]:
    new_by_name = {s.name: s for s in b.steps}
    changes = []
    for o in a.steps:
        if o.name not in step_map:
            changes.append(Change(o.kind, "removed", o.name, None, "dropped"))
            continue
        n = new_by_name[step_map[o.name]]
        notes = _step_notes(o, n, step_map)
        status = "renamed" if o.name != n.name else "changed" if notes else "kept"
        changes.append(Change(o.kind, status, o.name, n.name, "none", notes))
    reached = set(step_map.values())
    for n in b.steps:
        if n.name not in reached:
            changes.append(
                Change(n.kind, "added", None, n.name, "new", tuple(_fn_notes({}, n.fns)))
            )
    return tuple(changes)


def _step_notes(o: StepFacts, n: StepFacts, step_map: dict[str, str]) -> tuple[str, ...]:
    notes = []
    for key in sorted(set(o.params) | set(n.params)):
        was, now = o.params.get(key), n.params.get(key)
        if was != now:
            notes.append(f"{key}: {_show(was)} -> {_show(now)}")
    notes.extend(_fn_notes(o.fns, n.fns))
    parents = tuple(step_map.get(p, p) for p in o.parents)
    if parents != n.parents:
        notes.append(f"after {', '.join(n.parents) or '-'} (was after {', '.join(o.parents)})")
    if o.name != n.name and not notes:
        notes.append("moved: its generated name follows its place in the chain")
    return tuple(notes)


def _fn_notes(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    notes = []
    for key in sorted(set(old) | set(new)):
        was, now = old.get(key), new.get(key)
        if was is None and now is not None:
            notes.append(f"{key}: {now['label']}")
        elif was is not None and now is not None and was["code"] != now["code"]:
            notes.append(f"{key}: {was['label']} -> {now['label']} (other code)")
        elif was is not None and now is not None and was.get("reads") != now.get("reads"):
            before, after = was.get("reads") or {}, now.get("reads") or {}
            changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
            what = ", ".join(
                _read_name(n)
                + (" (added)" if n not in before else " (gone)" if n not in after else "")
                for n in changed
            )
            notes.append(f"{key}: {now['label']} reads other values: {what}")
        elif was is not None and now is None:
            notes.append(f"{key}: {was['label']} -> -")
    return notes


def _match_topics(
    a: TopologyIdentity, b: TopologyIdentity, step_map: dict[str, str]
) -> dict[str, str]:
    """Old topic -> new topic: by name, and an internal topic through its step's rename."""
    old_names = {t.name for t in a.topics}
    new_names = {t.name for t in b.topics}
    by_owner = {(t.step, t.role): t.name for t in b.topics if t.step is not None}
    out = {}
    for t in a.topics:
        if t.name in new_names:
            out[t.name] = t.name
        elif t.step is not None and t.step in step_map:
            renamed = by_owner.get((step_map[t.step], t.role))
            if renamed is not None and renamed not in old_names:  # (else it is that one's)
                out[t.name] = renamed
    return out


def _topic_changes(
    a: TopologyIdentity, b: TopologyIdentity, topic_map: dict[str, str], start_over: str
) -> tuple[Change, ...]:
    new_by_name = {t.name: t for t in b.topics}
    changes = []
    for o in a.topics:
        if o.name not in topic_map:
            changes.append(Change(o.role, "removed", o.name, None, "dropped"))
            continue
        n = new_by_name[topic_map[o.name]]
        notes, effect = [], "none"
        if o.queues != n.queues:
            notes.append(f"queues: {_queues(o.queues)} -> {_queues(n.queues)}")
            if o.queues is not None and n.queues is not None:
                # The log keeps a topic's queue count; keys would hash elsewhere.
                effect = "misread"
        for side in ("key_serde", "value_serde"):
            was, now = getattr(o, side), getattr(n, side)
            if was != now:
                notes.append(f"{side}: {was} -> {now}")
                if o.role != "source":  # a source's raw lines are parsed again anyway
                    effect = "misread"
        if o.name != n.name:
            status = "renamed"
            notes.insert(0, f"renamed with step {o.step} -> {n.step}")
        else:
            status = "changed" if notes else "kept"
        hint = None
        if effect == "misread":
            hint = (
                f"records already in {o.name} were written with the old settings: write to "
                f"a new topic, or start the job over with {start_over}"
            )
        changes.append(Change(o.role, status, o.name, n.name, effect, tuple(notes), hint))
    reached = set(topic_map.values())
    changes.extend(
        Change(n.role, "added", None, n.name, "new") for n in b.topics if n.name not in reached
    )
    return tuple(changes)


def _store_changes(
    a: TopologyIdentity,
    b: TopologyIdentity,
    step_map: dict[str, str],
    topic_map: dict[str, str],
    start_over: str,
) -> tuple[Change, ...]:
    new_by_name = {s.name: s for s in b.stores}
    new_by_step = {s.step: s for s in b.stores}
    old_steps = {s.name: s for s in a.steps}
    changes = []
    reached = set()
    for o in a.stores:
        n = new_by_name.get(o.name)
        if n is None and o.step in step_map:
            n = new_by_step.get(step_map[o.step])
            if n is not None and n.name in {s.name for s in a.stores}:
                n = None  # that store is the old one of another step
        if n is None:
            changes.append(
                Change(o.kind, "removed", o.name, None, "dropped", ("its step is gone",))
            )
            continue
        reached.add(n.name)
        if o.name != n.name:
            changes.append(_renamed_store(o, n, old_steps.get(o.step), a.job_id))
            continue
        notes = _store_notes(o, n, topic_map)
        effect = "misread" if any(misread for _, misread in notes) else "none"
        status = "changed" if notes else "kept"
        hint = None
        if effect == "misread":
            hint = (
                f"start the job over with {start_over}, or give the step a new name= to build "
                "new state"
            )
        changes.append(
            Change(o.kind, status, o.name, n.name, effect, tuple(t for t, _ in notes), hint)
        )
    changes.extend(
        Change(n.kind, "added", None, n.name, "new", ("starts empty",))
        for n in b.stores
        if n.name not in reached
    )
    return tuple(changes)


def _renamed_store(o: StoreFacts, n: StoreFacts, step: StepFacts | None, job: str) -> Change:
    if o.step == n.step:  # the step kept its name: the job id changed
        why = f"the job id changed (store names start with it): {o.name} is orphaned"
        hint = f'keep the job id: StreamBuilder("{job}")'
    else:
        why = (
            f"step {o.step} is now {n.step}: the new store starts empty, the old state is orphaned"
        )
        method = step.method if step else o.kind
        hint = f'keep it by naming the step as before: .{method}(name="{o.step}")'
    return Change(o.kind, "renamed", o.name, n.name, "lost", (why,), hint)


def _store_notes(o: StoreFacts, n: StoreFacts, topic_map: dict[str, str]) -> list[tuple[str, bool]]:
    """What changed about a store kept under its name, and whether it misreads state."""
    notes: list[tuple[str, bool]] = []
    if o.kind != n.kind:
        notes.append((f"aggregation: {o.kind} -> {n.kind}", True))
    if o.serde != n.serde:
        notes.append((f"serde: {o.serde} -> {n.serde}: the stored values can not be read", True))
    if o.queues != n.queues:
        known = o.queues is not None and n.queues is not None
        why = ": keys would be looked up on other queues" if known else ""
        notes.append((f"queues: {_queues(o.queues)} -> {_queues(n.queues)}{why}", known))
    was, now = o.window or {}, n.window or {}
    if was != now:
        shape = {k: v for k, v in was.items() if k != "grace"} != {
            k: v for k, v in now.items() if k != "grace"
        }
        why = ": stored windows have the old bounds" if shape else ""
        notes.append((f"window: {_show(o.window)} -> {_show(n.window)}{why}", shape))
    if topic_map.get(o.input_topic, o.input_topic) != n.input_topic:
        notes.append(
            (
                f"split by topic {n.input_topic} (was {o.input_topic}): keys may be on "
                "other queues",
                True,
            )
        )
    return notes


def _queues(q: int | None) -> str:
    return "?" if q is None else str(q)


def _show(value: Any) -> str:
    if isinstance(value, dict) and "type" in value:
        window = _window(value)
        if window is not None:  # as `rstreams describe` prints it: tumbling size=... ms
            return str(window)
        # Every field of a window spec is a duration in milliseconds.
        unit = " ms" if str(value["type"]).endswith("Window") else ""
        fields = ", ".join(f"{k}={v}{unit}" for k, v in value.items() if k != "type")
        return f"{value['type']}({fields})"
    return "-" if value is None else str(value)


def _window(facts: dict[str, Any]) -> Any:
    """The window spec whose facts (``{"type": "TumblingWindow", "size": ...}``, their
    keys in any order: a job's recorded identity has them sorted) are ``facts``; None
    when they are not one rstreams knows."""
    from rstreams.dsl import windows

    cls = getattr(windows, str(facts["type"]), None)
    if not isinstance(cls, type) or not attrs.has(cls):
        return None
    try:
        return cls(**{k: v for k, v in facts.items() if k != "type"})
    except (TypeError, ValueError):
        return None


# -- text ----------------------------------------------------------------------------------

_LABEL = {"lost": "LOST", "misread": "MISREAD", STALE: "STALE"}


def _section(title: str, changes: tuple[Change, ...], out: list[str]) -> None:
    shown = [c for c in changes if c.status != "kept" or c.effect != "none"]
    kept = len(changes) - len(shown)
    if not shown and not kept:
        return
    out.append(f"  {title}:")
    width = max((len(_LABEL.get(c.effect, c.status)) for c in shown), default=0)
    for c in shown:
        label = _LABEL.get(c.effect, c.status)
        out.append(f"    {label:<{width}}  {c.name} [{c.kind}]")
        for note in c.notes:
            out.append(f"      {note}")
        if c.hint:
            out.append(f"      -> {c.hint}")
    if kept:
        out.append(f"    ({kept} unchanged)")


def _describe(d: TopologyDiff) -> str:
    job = d.old_job if d.old_job == d.new_job else f"{d.old_job} -> {d.new_job}"
    out = [f"Topology diff: {job}"]
    _section("Steps", d.steps, out)
    _section("Topics", d.topics, out)
    _section("Stores", d.stores, out)
    if d.uncompared:
        out.append("  Not compared:")
        out.extend(f"    {u}" for u in d.uncompared)
    if d.stale:
        parts = [
            f"{count} {what}(s)"
            for what, changes in (("store", d.stores), ("topic", d.topics))
            if (count := sum(c.effect == STALE for c in changes))
        ]
        out.append(
            f"  New input only: {' and '.join(parts)} keep what the earlier version computed; "
            + (
                "--fresh recomputes from all input"
                if d.start_over == "--fresh"
                else f"start over with {d.start_over} to recompute from all input"
            )
        )
    # The verdict comes last.
    if d.loses_state:
        parts = [
            f"{count} {what}(s) {effect}"
            for what, changes in (("store", d.stores), ("topic", d.topics))
            for effect in LOSSES
            if (count := sum(c.effect == effect for c in changes))
        ]
        out.append(f"  State: would be lost or misread: {', '.join(parts)}")
    else:
        kept = sum(c.status == "kept" for c in d.stores)
        but = ", but the change applies to new input only" if d.stale else ""
        out.append(f"  State: nothing lost ({kept} store(s) kept){but}")
    return "\n".join(out) + "\n"
