"""The `rstreams` command loads what the command it runs needs: the parsers (and code) of
the other modules' commands only for those commands, or to list them all."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from rstreams.cli import MODULE_COMMANDS, _common, build_parser

ROOT = Path(__file__).resolve().parents[2]
CORE = {"run", "graph", "describe", "diff"}


def commands(parser: argparse.ArgumentParser) -> set[str]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


@pytest.mark.parametrize("module", sorted(MODULE_COMMANDS))
def test_the_table_names_the_commands_each_module_adds(module: str) -> None:
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(module).add_parsers(sub, _common)
    assert set(sub.choices) == set(MODULE_COMMANDS[module])


def test_a_command_gets_the_core_commands_and_its_own_module() -> None:
    everything = CORE.union(*MODULE_COMMANDS.values())
    assert commands(build_parser()) == everything
    assert commands(build_parser("run")) == CORE
    assert commands(build_parser("consume")) == CORE | set(MODULE_COMMANDS["rstreams.admin"])
    assert commands(build_parser("top")) == CORE | {"top"}
    # An unknown command: every command, for argparse to list them.
    assert commands(build_parser("nosuch")) == everything


def test_an_in_memory_run_loads_neither_rich_nor_the_other_commands(tmp_path: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_text("a b\nb\n")
    code = (
        "import sys\n"
        "from rstreams.cli import main\n"
        f"assert main(['run', {str(ROOT / 'examples' / 'wordcount.py')!r}, '--input', "
        f"{str(words)!r}, '--in-memory', '-q', '--output', {str(tmp_path / 'o.jsonl')!r}]) == 0\n"
        "loaded = [m for m in ('rich', 'rstreams.admin', 'rstreams.live', "
        "'rstreams.runtime.spark.packenv') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o.jsonl").read_text().count("\n") == 2
