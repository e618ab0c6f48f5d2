"""The layering of docs/DESIGN (who may import whom), checked on the source.

The import graph of the rstreams modules is read with :mod:`ast`, not by importing them.
Each import is one of three kinds: ``module`` (runs when the module is imported),
``function`` (inside a function or method: runs when that is called) and ``type`` (under
``if TYPE_CHECKING:``: never runs). ``from pkg import name`` is an edge to the submodule
``pkg.name`` when there is one, else to ``pkg``; the implicit import of a module's parent
packages is not an edge.

Run this file as a script to print the graph's size and its cycles.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import rstreams

PACKAGE = Path(rstreams.__file__).resolve().parent

Edge = tuple[str, str, str]  # (importer, imported, kind)


def _modules() -> dict[str, tuple[Path, bool]]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (path, is_pkg)
    return mods


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The rstreams module ``name`` is (or is in: ``pkg.mod.attr`` -> ``pkg.mod``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _edges_of(module: str, path: Path, is_pkg: bool) -> Iterable[Edge]:
    package = module if is_pkg else module.rpartition(".")[0]

    def targets(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            return [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        if (  # importlib.import_module("rstreams.x")
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            return [node.args[0].value]
        return []

    def walk(node: ast.AST, kind: str) -> Iterable[Edge]:
        for child in ast.iter_child_nodes(node):
            child_kind = kind
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                child_kind = "type" if kind == "type" else "function"
            elif isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.body:
                    yield from walk_one(sub, "type")
                for sub in child.orelse:
                    yield from walk_one(sub, kind)
                continue
            yield from walk_one(child, child_kind)

    def walk_one(node: ast.AST, kind: str) -> Iterable[Edge]:
        for target in targets(node):
            if target == "rstreams" or target.startswith("rstreams."):
                owner = _owner(target)
                if owner is not None and owner != module:
                    yield module, owner, kind
        yield from walk(node, kind)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")), "module")


EDGES: set[Edge] = {e for m, (p, pkg) in MODULES.items() for e in _edges_of(m, p, pkg)}


def graph(kinds: Iterable[str]) -> dict[str, set[str]]:
    wanted = set(kinds)
    out: dict[str, set[str]] = {m: set() for m in MODULES}
    for a, b, kind in EDGES:
        if kind in wanted:
            out[a].add(b)
    return out


def cycles(adj: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(adj):
        if root in index:
            continue
        work = [(root, iter(sorted(adj[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(adj[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def _in(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def imports_from(importers: str, *imported: str) -> list[Edge]:
    """Imports of any kind by the modules of ``importers`` of modules of ``imported``."""
    return sorted(e for e in EDGES if _in(e[0], importers) and _in(e[1], *imported))


def test_the_graph_is_read() -> None:
    assert ("rstreams.runner", "rstreams.runtime.engine.coordination.local", "module") in EDGES
    assert ("rstreams.dsl.stream", "rstreams.planner.compiler", "function") in EDGES
    assert ("rstreams.dsl.stream", "rstreams.planner.topology", "type") in EDGES


def test_no_import_cycles_at_module_level() -> None:
    assert cycles(graph(["module"])) == []


def test_no_import_cycles_through_functions_either() -> None:
    assert cycles(graph(["module", "function"])) == []


def test_planner_imports_nothing_from_runtime_or_state() -> None:
    assert imports_from("rstreams.planner", "rstreams.runtime", "rstreams.state") == []


def test_spark_imports_neither_the_engine_nor_what_sits_on_top() -> None:
    assert (
        imports_from(
            "rstreams.runtime.spark",
            "rstreams.runtime.engine",
            "rstreams.runner",
            "rstreams.cli",
            "rstreams.cli_run",
            "rstreams.testing",
        )
        == []
    )


def test_engine_imports_nothing_that_sits_on_top() -> None:
    assert (
        imports_from(
            "rstreams.runtime.engine",
            "rstreams.runtime.spark",
            "rstreams.runner",
            "rstreams.cli",
            "rstreams.cli_run",
            "rstreams.testing",
        )
        == []
    )


def test_dsl_imports_no_planner_runtime_or_state_but_build_calls_the_planner() -> None:
    found = imports_from("rstreams.dsl", "rstreams.planner", "rstreams.runtime", "rstreams.state")
    assert found == [
        # StreamBuilder.build() compiles, lazily; the return type is only a type hint.
        ("rstreams.dsl.stream", "rstreams.planner.compiler", "function"),
        ("rstreams.dsl.stream", "rstreams.planner.topology", "type"),
    ]


def test_semantics_sits_between_the_backends_and_the_dsl() -> None:
    """The semantics core (windows, joins, aggregations) is plain Python over the DSL's
    nodes: no runtime, no Spark, no state stack; the DSL and planner do not use it."""
    core = "rstreams.semantics"
    found = {b for a, b, _ in EDGES if _in(a, core) and not _in(b, core)}
    assert found <= {
        "rstreams.dsl.nodes",
        "rstreams.dsl.windows",
        "rstreams.errors",
        "rstreams.serde",
        "rstreams.windowed",
    }
    assert imports_from("rstreams.dsl", "rstreams.semantics") == []
    assert imports_from("rstreams.planner", "rstreams.semantics") == []


def test_userfn_sits_below_everything() -> None:
    assert {b for a, b, _ in EDGES if a == "rstreams.userfn"} <= {"rstreams.errors"}


def test_the_job_layout_sits_below_everything_that_finds_a_file() -> None:
    """The engine, the queues, the membership, admin and live all ask it for paths."""
    assert {b for a, b, _ in EDGES if a == "rstreams.runtime.layout"} == set()


def test_the_redis_broker_is_part_of_the_queue_layer() -> None:
    """rstreams.runtime.queues.redisstreams knows no topology, state or engine: only the
    queue layer it belongs to and the errors."""
    found = {b for a, b, _ in EDGES if _in(a, "rstreams.runtime.queues.redisstreams")}
    assert {b for b in found if not _in(b, "rstreams.runtime.queues")} <= {"rstreams.errors"}


def test_options_and_config_sit_below_the_runtimes() -> None:
    # The declarations every layer reads its options from: they import no layer.
    assert {b for a, b, _ in EDGES if a == "rstreams.options"} <= {"rstreams.errors"}
    assert {b for a, b, _ in EDGES if a == "rstreams.config"} <= {
        "rstreams.errors",
        "rstreams.options",
    }


if __name__ == "__main__":
    for kind in ("module", "function", "type"):
        print(f"{kind}-level imports: {sum(1 for e in EDGES if e[2] == kind)}")
    for label, kinds in (
        ("module-level", ["module"]),
        ("with function-level", ["module", "function"]),
    ):
        found = cycles(graph(kinds))
        print(f"cycles, {label}: {len(found)}")
        for comp in found:
            print("   ", " <-> ".join(comp))


def test_the_entry_mapping_of_redis_streams_sits_below_both_backends() -> None:
    """rstreams.runtime.streamentries (a RedisStream's entries as records and back) is
    shared by the engine's ingest/egress and Spark's data source: it imports neither
    (rstreams.serde, for its JSON writer, sits below both too)."""
    found = {b for a, b, _ in EDGES if a == "rstreams.runtime.streamentries"}
    assert found <= {"rstreams.dsl.external", "rstreams.serde"}
    assert {b for a, b, _ in EDGES if a == "rstreams.serde"} <= {
        "rstreams.errors",
        "rstreams.windowed",
    }


#: The engine's rooms, lowest first: a package may import the ones before it, never the
#: ones after (docs/architecture.md, "The engine's rooms").
ENGINE_ROOMS = ("operators", "tasks", "io", "coordination")


def _room(module: str) -> str | None:
    prefix = "rstreams.runtime.engine."
    return module[len(prefix) :].split(".")[0] if module.startswith(prefix) else None


def _rank(module: str) -> int:
    room = _room(module)
    return ENGINE_ROOMS.index(room) if room in ENGINE_ROOMS else -1


def test_every_engine_module_lives_in_a_room() -> None:
    loose = [
        m
        for m in MODULES
        if m.startswith("rstreams.runtime.engine.") and _room(m) not in ENGINE_ROOMS
    ]
    assert loose == [], "put these in one of the engine's packages " + str(ENGINE_ROOMS)


def test_the_engine_rooms_import_only_downwards() -> None:
    upward = [(a, b, kind) for a, b, kind in sorted(EDGES) if _rank(a) >= 0 and _rank(b) > _rank(a)]
    assert upward == []
    # (the rule has something to hold: coordination does import every room below it)
    assert {_room(b) for a, b, _ in EDGES if _room(a) == "coordination"} >= set(ENGINE_ROOMS)


def test_the_queue_layer_chooses_the_broker_and_knows_no_engine() -> None:
    """File log or Redis is decided in rstreams.runtime.queues (brokers.py), which
    imports nothing of the engine, so the engine only asks it for a broker."""
    assert imports_from("rstreams.runtime.queues", "rstreams.runtime.engine") == []
    assert "rstreams.runtime.queues.brokers" in MODULES
