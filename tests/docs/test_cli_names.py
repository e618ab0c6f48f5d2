"""Every ``rstreams`` command line the docs and the README show names a command that
exists and only options that command has: a renamed or removed option can not live on in
a page (the snippets that run are checked by test_snippets; this covers the rest)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from rstreams.cli import build_parser

pytestmark = pytest.mark.fast  # in ./dev test --fast (see pyproject.toml's markers)

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A command line as the docs show one: in a code span or block, maybe after "$ ".
LINE = re.compile(r"(?:^|`|\$ )(rstreams [^`\n]*)")


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser("every-command")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(p: argparse.ArgumentParser) -> set[str]:
    opts = {o for a in p._actions for o in a.option_strings}
    for a in p._actions:  # (nested subcommands, e.g. `spark pack-env`)
        if isinstance(a, argparse._SubParsersAction):
            for child in a.choices.values():
                opts |= _options(child)
    return opts


def _lines() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for line in LINE.findall(page.read_text(encoding="utf-8")):
            line = line.split(" # ")[0].split(";")[0].split("|")[0].split("&&")[0]
            found.append((page.name, line.strip()))
    return found


LINES = _lines()


def test_the_docs_show_many_command_lines() -> None:
    assert len(LINES) > 50


@pytest.mark.parametrize(("page", "line"), LINES, ids=[f"{p}:{line[:60]}" for p, line in LINES])
def test_each_command_and_option_shown_exists(page: str, line: str) -> None:
    try:
        words = shlex.split(line)
    except ValueError:  # (an unclosed quote in prose: the words up to it)
        words = line.split()
    commands = _commands()
    if len(words) < 2 or not re.fullmatch(r"[a-z][a-z-]*", words[1]):
        return  # ("rstreams ..." as a placeholder, or the bare command)
    assert words[1] in commands, f"{page}: `{line}`: no command {words[1]!r}"
    known = _options(commands[words[1]]) | {"--help", "-h"}
    for w in words[2:]:
        if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", w):
            opt = w.split("=")[0]
            assert opt in known, f"{page}: `{line}`: {words[1]} has no option {opt}"
