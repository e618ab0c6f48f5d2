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
    assert changed.kind == "flatMap" and "reads other values: global WORD" in changed.notes[0]


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


# -- what a step reads besides its code: each kind, compared by value ------------------------

#: A pipeline whose steps read one value of every kind the identity compares; ``{V}`` is
#: where two versions differ.
_KINDS = """
import dataclasses, enum, functools, re
from rstreams import StreamBuilder
import {module} as settings

STOP = {{"en": {{"the", "a", "of", "to", "in", "and"}}, "de": frozenset({{"der", "die", "das"}})}}
LONG = re.compile(r"{long}" + "{V}")

class Mode(enum.Enum):
    LOWER = 1
    UPPER = 2

@dataclasses.dataclass(frozen=True)
class Rules:
    sep: str
    modes: tuple

class Slotted:
    __slots__ = ("sep",)
    def __init__(self, sep):
        self.sep = sep

class Tok:
    def __init__(self, sep):
        self.sep = sep
    def __call__(self, line):
        return line.split(self.sep)

def helper(line):
    return [w for w in line.split() if w not in STOP["en"]]

def cut(line, sep=" ", limit=-1):
    return line.split(sep, limit)

RULES = Rules("{V}", (Mode.LOWER,))

def build():
    slotted = Slotted("{V}")
    b = StreamBuilder("kinds")
    s = b.source("lines")
    s.flatMap(lambda line: helper(line)).sink("a")
    s.flatMap(lambda line: LONG.findall(line)).sink("b")
    s.flatMap(lambda line: line.split(slotted.sep)).sink("c")
    s.flatMap(lambda line, rules=RULES: line.split(rules.sep)).sink("d")
    s.flatMap("{V}".split).sink("e")
    s.flatMap(Tok("{V}")).sink("f")
    s.flatMap(functools.partial(cut, sep="{V}")).sink("g")
    s.flatMap(lambda line: line.split(settings.SEP)).sink("h")
    return b
"""


def _kinds(tmp_path: Path, version: str, name: str = "kinds") -> Path:
    """A copy of :data:`_KINDS` (and its settings module) where ``{V}`` is ``version``."""
    module = f"settings_{name}"
    (tmp_path / f"{module}.py").write_text(f"SEP = {version!r}\n")
    path = tmp_path / f"{name}.py"
    path.write_text(_KINDS.format(module=module, long="x" * 250, V=version))
    return path


def test_every_kind_of_read_value_is_the_same_in_every_process(tmp_path: Path) -> None:
    """No hash() of a str (sets and dicts of strings iterate in another order under
    another PYTHONHASHSEED), no id(), no address."""
    path = _kinds(tmp_path, ",")
    first, second, third = (_identity_in_subprocess(path, seed) for seed in ("1", "2", "4242"))
    assert first == second == third
    assert "0x" not in first
    reads = {s["name"]: f for s in json.loads(first)["steps"] for f in s["fns"].values()}
    assert all(not str(v).startswith("opaque") for f in reads.values() for v in f["reads"].values())


def test_a_change_in_anything_a_step_reads_changes_that_step(tmp_path: Path) -> None:
    """Each flatMap reads the changed value another way: a global helper reading a global
    (a dict of sets), a regex longer than its repr shows, an object with __slots__ closed
    over, a dataclass default, a bound built-in method, a callable object, a partial's
    keyword, a module of the pipeline's own."""
    old = load_topology(str(_kinds(tmp_path, ",", "old")))
    new = load_topology(str(_kinds(tmp_path, ";", "new")))
    d = diff(old, new)
    changed = {c.new: c.notes[0] for c in d.steps if c.status == "changed"}
    # (the first flatMap's helper reads no {V}; see below)
    assert sorted(changed) == [f"lines.{i}-flatMap-1" for i in range(1, 8)], d.describe()
    assert "reads other values: global LONG" in changed["lines.1-flatMap-1"]
    assert "reads other values: closed-over value slotted" in changed["lines.2-flatMap-1"]
    assert "(other code)" in changed["lines.3-flatMap-1"]  # (defaults are in the code's key)
    assert "reads other values: the object it is bound to" in changed["lines.4-flatMap-1"]
    assert "reads other values: the callable object" in changed["lines.5-flatMap-1"]
    assert "reads other values: its partial arguments" in changed["lines.6-flatMap-1"]
    assert "reads other values: global settings" in changed["lines.7-flatMap-1"]
    assert not d.uncompared
    # The helper reads STOP: a change there is one of the helper's.
    (tmp_path / "stop.py").write_text(
        (tmp_path / "old.py").read_text().replace('"the", "a"', '"the", "an"')
    )
    changed_stop = diff(old, load_topology(str(tmp_path / "stop.py")))
    assert [c.new for c in changed_stop.steps if c.status == "changed"] == ["lines-flatMap-1"]


def test_what_has_no_comparable_form_is_said_wherever_it_is_read(tmp_path: Path) -> None:
    """A library's object (a lock, a ConfigParser) read as a global, closed over, as a
    default, or by a helper function or an attribute is listed, never counted unchanged
    in silence."""
    source = """
import configparser, threading
from rstreams import StreamBuilder

CONFIG = configparser.ConfigParser()

class Holder:
    def __init__(self):
        self.lock = threading.Lock()
        self.sep = " "

HOLDER = Holder()

def helper(line):
    return line.split() if CONFIG.sections() else [line]

def build():
    lock = threading.Lock()
    b = StreamBuilder("opaque")
    s = b.source("lines")
    s.flatMap(lambda line: helper(line)).sink("a")
    s.flatMap(lambda line: [line, lock]).sink("b")
    s.flatMap(lambda line, cfg=CONFIG: [line, cfg]).sink("c")
    s.flatMap(lambda line: line.split(HOLDER.sep)).sink("d")
    return b
"""
    path = tmp_path / "opaque.py"
    path.write_text(source)
    topology = load_topology(str(path))
    d = diff(topology, topology)
    assert d.unchanged
    said = "\n".join(d.uncompared)
    for step, what in (
        ("lines-flatMap-1", "reads global helper.CONFIG, a ConfigParser object"),
        ("lines.1-flatMap-1", "reads closed-over value lock, a lock object"),
        ("lines.2-flatMap-1", "reads default cfg, a ConfigParser object"),
        ("lines.3-flatMap-1", "reads global HOLDER.lock, a lock object"),
    ):
        assert f"{step}: fn {what}: its value has no comparable form" in said, said
    assert "Not compared:" in d.describe()
    # The comparable parts still compare: another separator is another step.
    changed = diff(topology, load_topology(_write(tmp_path, source.replace('" "', '","'))))
    assert [c.new for c in changed.steps if c.status == "changed"] == ["lines.3-flatMap-1"]


def _write(tmp_path: Path, source: str) -> str:
    path = tmp_path / "opaque_v2.py"
    path.write_text(source)
    return str(path)


def test_reads_recorded_in_an_earlier_form_compare_by_code_and_say_so() -> None:
    """An identity whose reads came from the first version of this (no reads_format) is
    compared by code only, once: the next run records the new form."""
    topology = load_topology(str(CASES / "changed_global" / "old.py"))
    now = identity(topology)
    steps = tuple(
        attrs.evolve(s, fns={k: {**f, "reads": {"WORD": "0123456789ab"}} for k, f in s.fns.items()})
        for s in now.steps
    )
    for f in (f for s in steps for f in s.fns.values()):
        del f["reads_format"]
    recorded = TopologyIdentity.from_json(attrs.evolve(now, steps=steps).to_json())
    d = diff(recorded, now)
    assert d.unchanged
    assert any("compared by code only" in u for u in d.uncompared)
    assert diff(now, now).uncompared == ()
