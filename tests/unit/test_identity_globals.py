"""The code identity of a step covers the globals its functions read (the tokenizer a
lambda calls), is the same in every process, and says what it can not compare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs

from rstreams.loader import load_topology
from rstreams.planner.diff import diff
from rstreams.planner.identity import TopologyIdentity, global_reads, identity

CASES = Path(__file__).resolve().parents[1] / "golden" / "diff"

_PRINT = (
    "import json, sys; from rstreams.loader import load_topology; "
    "from rstreams.planner.identity import identity; "
    "print(identity(load_topology(sys.argv[1])).to_json())"
)


def _identity_in_subprocess(path: Path, seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-c", _PRINT, str(path)], capture_output=True, text=True, env=env,
        check=True,
    )  # fmt: skip
    return out.stdout


def test_the_identity_is_the_same_in_every_process() -> None:
    for case in ("changed_global", "changed_closure"):
        path = CASES / case / "old.py"
        first, second = (_identity_in_subprocess(path, seed) for seed in ("1", "4242"))
        assert first == second
        reads = [f.get("reads") for s in json.loads(first)["steps"] for f in s["fns"].values()]
        assert any(reads) or case == "changed_closure"


def test_a_changed_global_regex_changes_the_step() -> None:
    old, new = (load_topology(str(CASES / "changed_global" / v)) for v in ("old.py", "new.py"))
    d = diff(old, new)
    assert not d.unchanged
    (changed,) = [c for c in d.steps if c.status == "changed"]
    assert changed.kind == "flatMap" and "reads other globals: WORD" in changed.notes[0]


class _Plain:
    def __init__(self, lower: bool) -> None:
        self.lower = lower


def test_a_plain_object_compares_by_its_attributes() -> None:
    a, b, c = _Plain(True), _Plain(True), _Plain(False)

    def reads(obj: _Plain) -> str:
        namespace = {"OBJ": obj}
        fn = eval("lambda line: line.lower() if OBJ.lower else line", namespace)
        return global_reads(fn)["OBJ"]

    assert reads(a) == reads(b) != reads(c)
    assert not reads(a).startswith("opaque")


def test_functions_read_through_globals_count_with_their_own_globals() -> None:
    namespace: dict = {}
    exec("SEP = ' '\ndef split(line):\n    return line.split(SEP)\n", namespace)
    fn = eval("lambda line: split(line)", namespace)
    before = global_reads(fn)["split"]
    namespace["SEP"] = ","
    assert global_reads(fn)["split"] != before


def test_an_identity_recorded_before_globals_were_covered_compares_unchanged() -> None:
    """A job recorded by an earlier version (no "reads") is not told that every step
    changed by an upgrade alone."""
    topology = load_topology(str(CASES / "changed_global" / "old.py"))
    now = identity(topology)
    steps = tuple(
        attrs.evolve(s, fns={k: {"label": f["label"], "code": f["code"]} for k, f in s.fns.items()})
        for s in now.steps
    )
    recorded = TopologyIdentity.from_json(attrs.evolve(now, steps=steps).to_json())
    assert diff(recorded, now).unchanged
    assert diff(recorded, load_topology(str(CASES / "changed_global" / "new.py"))).unchanged
