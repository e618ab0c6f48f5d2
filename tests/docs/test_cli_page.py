"""docs/cli.md and docs/index.md agree with the `rstreams` parser.

The synopsis and the option tables of docs/cli.md are generated from
:func:`rstreams.cli.build_parser` by the site's MkDocs hook (docs/_hooks/generate.py)
where the page has a marker; the hand-written prose around them must name only options
that exist, and the home page must list every command.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from rstreams.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
CLI_PAGE = ROOT / "docs" / "cli.md"

pytest.importorskip("mkdocs", reason="the docs hook needs pip install 'rstreams[docs]'")

pytestmark = pytest.mark.fast  # in ./dev test --fast (see pyproject.toml's markers)


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hook", ROOT / "docs/_hooks/generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def leaf_commands() -> dict[str, argparse.ArgumentParser]:
    """'run', 'topics', 'spark pack-env', ...: every command that runs something."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if path and not subs:
            out[" ".join(path)] = parser
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, (*path, name))

    walk(build_parser(), ())
    return out


def test_every_command_and_option_is_on_the_page(hook: ModuleType) -> None:
    source = CLI_PAGE.read_text(encoding="utf-8")
    page = hook.cli_page(source)
    synopsis = page[: page.index("## Pipeline files")]
    commands = leaf_commands()
    assert {"run", "state", "top", "diff", "topics", "spark pack-env"} <= set(commands)
    for path, parser in commands.items():
        assert re.search(rf"^rstreams {path} ", synopsis, re.M), f"{path}: not in the synopsis"
        marker = f"<!-- cli: options {path} -->"
        assert marker in source, f"docs/cli.md has no options table for `rstreams {path}`"
        table = hook.cli_options(path)
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert f"`{option}" in table or f", {option}" in table, (path, option)
            if action.option_strings:  # usage shows an option by its first spelling
                first_spelling = re.escape(action.option_strings[0])
                assert re.search(rf"[\[ ]{first_spelling}\b", synopsis), (path, action.dest)
            if action.help:  # the parser's own words (as Markdown shows them)
                shown = html.unescape(" ".join(table.split()).replace("\\", ""))
                first = " ".join(action.help.split("%(")[0].split()[:4])
                assert first in shown, (path, action.dest)
    assert "<!-- cli:" not in page  # every marker was replaced


def test_the_generated_parts_are_not_also_written_by_hand() -> None:
    source = CLI_PAGE.read_text(encoding="utf-8")
    assert not re.search(r"^\| `-", source, re.M), "a hand-written options table"
    assert not re.search(r"^\$ rstreams run PIPELINE\.py", source, re.M), "a hand-written synopsis"


def test_the_prose_names_only_options_that_exist() -> None:
    options = {"--help", "--version"}
    for parser in leaf_commands().values():
        options.update(o for a in parser._actions for o in a.option_strings)
    source = CLI_PAGE.read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", source))
    assert named - options == set(), "docs/cli.md names options the command does not have"


def test_the_home_page_lists_every_command() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    (row,) = [line for line in index.splitlines() if "the `rstreams` command (" in line]
    listed = set(re.findall(r"`([a-z][a-z -]*)`", row))
    assert set(leaf_commands()) <= listed, set(leaf_commands()) - listed
