"""Configuration is declared once: every option of ``rstreams run`` comes from an
``option()`` declaration of the run's tree (or the command's own), no option name or
default is written in two config classes unless the table below says why, and no
code copies the command line's values into a config field by field."""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import re
import tokenize
from pathlib import Path

import attrs
import pytest

import rstreams
from rstreams import cli_run
from rstreams.cli import build_parser
from rstreams.cli_run import RUN_OPTIONS, RunCommandOptions, run_config
from rstreams.config import RunConfig, SparkConfig, WorkerConfig
from rstreams.options import KEY, declared, flagged, sections, tree
from rstreams.runtime.engine.operators.context import EngineConfig

pytestmark = pytest.mark.fast

PACKAGE = Path(rstreams.__file__).resolve().parent

#: Names that two config classes declare on purpose, and why. Another name declared
#: twice fails the test until it is either declared once or said here.
SHARED = {
    # The engine's policy is the run's: EngineConfig.of takes it from the run; its
    # default is read from RunConfig's declaration, not written again.
    ("EngineConfig", "on_error"): "from RunConfig",
    # In process the engine runs at-least-once on memory stores (nothing survives the
    # process): IN_PROCESS_GUARANTEE / IN_PROCESS_STATE, named in rstreams.config.
    ("EngineConfig", "guarantee"): "IN_PROCESS_GUARANTEE",
    ("EngineConfig", "state"): "IN_PROCESS_STATE",
    # Records per poll of an in-process task vs per turn of a durable worker: see the
    # comment on EngineConfig.batch_size.
    ("EngineConfig", "batch_size"): "in-process poll",
}

CLASSES = [RunCommandOptions, *tree(RunConfig), EngineConfig]


def run_parser() -> argparse.ArgumentParser:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices["run"]


def test_the_tree_is_the_run_with_its_sections() -> None:
    assert tree(RunConfig) == [RunConfig, SparkConfig, WorkerConfig]


def test_every_run_flag_comes_from_an_option_declaration() -> None:
    parser = run_parser()
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    assert set(actions) - {"help", "quiet", "verbose"} == {name for _, name in RUN_OPTIONS}
    for cls, name in RUN_OPTIONS:
        field = attrs.fields_dict(cls)[name]
        assert KEY in field.metadata, f"{cls.__name__}.{name} is not declared with option()"
        assert actions[name].option_strings == [declared(cls, name).flag]
    # ...and every flagged option of the tree is a flag of `rstreams run`.
    assert {(c, n) for c in tree(RunConfig) for n in flagged(c)} <= set(RUN_OPTIONS)


def test_no_option_name_is_declared_twice_unless_said_why() -> None:
    seen: dict[str, str] = {}
    twice = set()
    for cls in CLASSES:
        for f in attrs.fields(cls):
            if f.name in dict(sections(cls)):
                continue
            if f.name in seen:
                twice.add((cls.__name__, f.name))
            seen.setdefault(f.name, cls.__name__)
    assert twice == set(SHARED)


def test_a_shared_name_does_not_write_its_default_again() -> None:
    # EngineConfig.on_error reads RunConfig's default; the in-process choices are named.
    source = inspect.getsource(EngineConfig)
    for (_, name), origin in SHARED.items():
        line = next(x for x in source.splitlines() if re.match(rf"\s+{name}: ", x))
        if origin == "from RunConfig":
            assert f'field_default(RunConfig, "{name}")' in line, line
        elif origin.startswith("IN_PROCESS"):
            assert origin in line, line


def _string_literals(path: Path) -> list[str]:
    """The string tokens of a module that are not docstrings (comments are no tokens)."""
    source = path.read_text(encoding="utf-8")
    docs = {
        node.body[0].lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.string for t in tokens if t.type == tokenize.STRING and t.start[0] not in docs]


def test_the_data_dir_default_is_written_once() -> None:
    holders = [
        p.relative_to(PACKAGE).as_posix()
        for p in sorted(PACKAGE.rglob("*.py"))
        if '".rstreams"' in _string_literals(p)
    ]
    assert holders == ["config.py"]


def test_membership_session_timeouts_are_the_workers_default() -> None:
    from rstreams.runtime.rebalance.membership import SESSION_TIMEOUT, FileGroupMembership
    from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership

    assert WorkerConfig().session_timeout == SESSION_TIMEOUT
    for cls in (FileGroupMembership, RedisGroupMembership):
        default = inspect.signature(cls.__init__).parameters["session_timeout"].default
        assert default is SESSION_TIMEOUT


def test_no_field_is_copied_from_the_command_line_by_hand() -> None:
    source = inspect.getsource(cli_run)
    assert not hasattr(cli_run, "_run_config") and not hasattr(cli_run, "RUN_FLAGS")
    fields = {f for cls in tree(RunConfig) for f in attrs.fields_dict(cls)}
    copied = [m for m in re.findall(r"(\w+)=args\.(\w+)", source) if m[0] in fields]
    assert copied == [], copied


def test_every_run_option_reaches_the_config(tmp_path) -> None:
    """Each flag of the tree given a value other than its default ends in the config
    (the command line's values become the tree whole)."""
    given = {
        "--workers": ("workers", "3", 3),
        "--guarantee": ("guarantee", "at-least-once", "at-least-once"),
        "--commit-interval": ("commit_interval", "0.25", 0.25),
        "--session-timeout": ("session_timeout", "7", 7.0),
        "--conf": ("conf", "spark.x=1", ("spark.x=1",)),
        "--idle-timeout": ("idle_timeout", "2", 2.0),
    }
    argv = ["p.py", "--input", "x"] + [x for flag, (_, v, _) in given.items() for x in (flag, v)]
    config = run_config(run_parser().parse_args(argv))
    values = {
        **attrs.asdict(config, recurse=False),
        **attrs.asdict(config.on_spark),
        **attrs.asdict(config.worker),
    }
    for _, (name, _, expected) in given.items():
        assert values[name] == expected, name
    assert config.pipeline == "p.py"
