"""Which step of one version of a pipeline is which of the next, and what changed
upstream of each: the step matching :func:`rstreams.planner.diff.diff` builds its
report on.

Steps are matched by name, then by what they do (kind, functions, parameters) with
their parents matched first (:func:`match_steps`); a step's *causes* are the steps
added, removed, moved or changed at it or before it (:func:`upstream_changes`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from rstreams.planner.identity import StepFacts, TopologyIdentity

#: Steps that do not change the records after them (a change there leaves state as is).
_PASS_THROUGH = frozenset({"foreach", "peek", "print"})

#: Step parameters that say where records go, not what they are (their changes are
#: reported as losses where they matter).
_PLACEMENT = frozenset({"queues", "repartition"})


def match_steps(old: Iterable[StepFacts], new: Iterable[StepFacts]) -> dict[str, str]:
    """Old step name -> new step name, for the steps of ``old`` that ``new`` still has.

    In four passes, each over what the earlier ones left: the same name, kind and
    signature; the same name and kind (a changed step: a store of that name is reused
    whatever changed, so that is the pair that matters for state); the same kind and
    signature under another name (a step that moved), taking new steps in pipeline
    order and preferring, in turn, an old step whose parents match the new one's, one of
    the same chain, and the nearest depth; last, the only old step of the kind after
    the same parents (a step that moved and changed).
    """
    old_steps, new_steps = list(old), list(new)
    by_name = {s.name: s for s in old_steps}
    matched: dict[str, str] = {}
    taken: set[str] = set()

    def pair(o: StepFacts, n: StepFacts) -> None:
        matched[o.name] = n.name
        taken.add(n.name)

    for exact in (True, False):
        for n in new_steps:
            o = by_name.get(n.name)
            if n.name in taken or o is None or o.name in matched or o.kind != n.kind:
                continue
            if not exact or o.signature == n.signature:
                pair(o, n)
    for n in new_steps:
        if n.name in taken:
            continue
        candidates = [
            o for o in old_steps
            if o.name not in matched and o.kind == n.kind and o.signature == n.signature
        ]  # fmt: skip
        if not candidates:
            continue

        def rank(o: StepFacts, n: StepFacts = n) -> tuple[bool, bool, int]:
            parents = tuple(matched.get(p) for p in o.parents)
            return (parents != n.parents, o.chain != n.chain, abs(o.depth - n.depth))

        pair(min(candidates, key=rank), n)
    # Last, a step that moved *and* changed: the one old step of its kind after the same
    # (matched) parents.
    for n in new_steps:
        if n.name in taken or not n.parents:
            continue
        candidates = [
            o for o in old_steps
            if o.name not in matched and o.kind == n.kind
            and tuple(matched.get(p) for p in o.parents) == n.parents
        ]  # fmt: skip
        if len(candidates) == 1:
            pair(candidates[0], n)
    return matched


def upstream_changes(
    a: TopologyIdentity, b: TopologyIdentity, step_map: dict[str, str]
) -> dict[str, tuple[str, ...]]:
    """New step name -> the changes at it or upstream of it that change its records:
    steps added, removed, moved to other inputs, or doing something else (other code or
    parameters), e.g. ``('lines-filter-2 [filter] added',)``.

    A step that only got another generated name (because one was inserted before it)
    is not a change of its own: its inputs are compared through the added and removed
    steps. Steps that pass records through unchanged (peek, foreach, print) count for
    nothing.
    """
    old_by_name = {s.name: s for s in a.steps}
    new_by_name = {s.name: s for s in b.steps}
    back = {new: old for old, new in step_map.items()}

    def shapes(s: StepFacts) -> bool:
        return s.kind not in _PASS_THROUGH

    def old_inputs(parents: Iterable[str]) -> list[str]:
        # Through removed steps, as new names: what the step read, edits aside.
        out: list[str] = []
        for p in parents:
            if p in step_map:
                out.append(step_map[p])
            elif p in old_by_name:
                out.extend(old_inputs(old_by_name[p].parents))
        return out

    def new_inputs(parents: Iterable[str]) -> list[str]:
        out: list[str] = []
        for p in parents:
            out.extend(new_inputs(new_by_name[p].parents) if p not in back else [p])
        return out

    def removed_before(parents: Iterable[str]) -> list[str]:
        out: list[str] = []
        for p in parents:
            if p not in step_map and p in old_by_name:
                o = old_by_name[p]
                out.extend(removed_before(o.parents))
                if shapes(o):
                    out.append(f"{o.name} [{o.kind}] removed")
        return out

    causes: dict[str, tuple[str, ...]] = {}
    for n in b.steps:  # (in pipeline order: parents first)
        found = [c for p in n.parents for c in causes.get(p, ())]
        o = old_by_name.get(back.get(n.name, ""))
        if o is not None:
            found.extend(removed_before(o.parents))
        if shapes(n):
            if o is None:
                found.append(f"{n.name} [{n.kind}] added")
            elif _meaning(o) != _meaning(n):
                found.append(f"{n.name} [{n.kind}] changed")
            elif old_inputs(o.parents) != new_inputs(n.parents):
                found.append(f"{n.name} [{n.kind}] moved")
        causes[n.name] = tuple(dict.fromkeys(found))
    return causes


def _meaning(s: StepFacts) -> str:
    """What a step does to its records: its signature without where they go."""
    params = {k: v for k, v in s.params.items() if k not in _PLACEMENT}
    code = {k: [v["code"], v.get("reads")] for k, v in s.fns.items()}
    return json.dumps([s.kind, params, code], sort_keys=True, default=str)
