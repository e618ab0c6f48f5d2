"""MkDocs hook: pages made from the code at build time, so they can not go stale.

- ``reference/cli.md``: every command and subcommand of ``rstreams``, with the help
  text its argparse parser prints (walked from :func:`rstreams.cli.build_parser`);
- ``gallery/``: for each example of examples/, its code, its topology drawn by
  rstreams' own renderer (graphviz ``dot``) and the first rows of each table it gives
  when run on its sample data in examples/data/ (the in-process engine).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import os
import re
import runpy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from markdown.extensions import Extension
from markdown.preprocessors import Preprocessor
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DATA = EXAMPLES / "data"

#: The sample data each example runs on (source topic -> file of examples/data/).
EXAMPLE_INPUTS: dict[str, dict[str, str]] = {
    "wordcount": {"sentences": "corpus.txt"},
    "wordcount_spark": {"sentences": "corpus.txt"},
    "branching": {"lines": "corpus.txt"},
    "stats": {"lines": "corpus.txt"},
    "windowed_wordcount": {"timed-sentences": "timed_sentences.txt"},
    "sessions": {"clicks": "clicks.jsonl"},
    "order_payment_join": {"orders": "orders.jsonl", "payments": "payments.jsonl"},
    "access_log": {"access-log": "access.log"},
    "enrichment": {"shop": "shop.jsonl"},
}

ROWS = 8


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("rstreams",)
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (command path, parser) below ``parser``, depth first, in declared order."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def cli_reference() -> str:
    from rstreams.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps help text to the terminal's width
    try:
        parts = [
            "# CLI reference\n",
            "Generated from the command's own argparse parsers when the site is built: "
            "what `--help` prints, for every command. The [command line guide](../cli.md) "
            "explains them with examples.\n",
        ]
        for path, parser in commands(build_parser()):
            level = "#" * min(len(path) + 1, 4)
            parts.append(f"{level} `{' '.join(path)}`\n")
            parts.append(f"```text\n{parser.format_help().rstrip()}\n```\n")
        return "\n".join(parts)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse wraps its help text to the terminal's width: make it the page's."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def cli_synopsis() -> str:
    """A ```text block with the usage line of every command that runs something."""
    from rstreams.cli import build_parser

    lines = []
    with _columns(100):
        for _, parser in commands(build_parser()):
            if _subcommands(parser):
                continue  # a group of commands: its commands have their own lines
            usage = parser.format_usage().rstrip().replace(" [-h]", "", 1).splitlines()
            indent = len("usage: ")
            lines.append(usage[0][indent:])
            lines += [line[indent:] for line in usage[1:]]
    lines.append("rstreams --version")
    return "```text\n" + "\n".join(lines) + "\n```\n"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _md_text(text: str) -> str:
    """``text`` for a Markdown table cell: its `code` spans as they are, the rest with
    the characters Markdown would take for markup escaped."""
    out = []
    for i, part in enumerate(text.split("`")):
        if i % 2 == 0:
            part = html.escape(part, quote=False)
            for ch in "\\*_|[]":
                part = part.replace(ch, "\\" + ch)
        out.append(part)
    return "`".join(out)


def cli_options(path: str) -> str:
    """The Markdown table of the arguments and options of ``rstreams PATH`` (e.g.
    ``"run"``, ``"spark pack-env"``), with the help text its parser prints."""
    from rstreams.cli import build_parser

    parser = build_parser()
    for name in path.split():
        sub = _subcommands(parser).get(name)
        if sub is None:
            raise SystemExit(f"docs/_hooks/generate.py: no command `rstreams {path}`")
        parser = sub
    formatter = parser._get_formatter()
    rows = ["| argument or option | meaning |", "| --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        invocation = formatter._format_action_invocation(action).replace("|", "\\|")
        meaning = formatter._expand_help(action) if action.help else ""
        rows.append(f"| `{invocation}` | {_md_text(' '.join(meaning.split()))} |")
    return "\n".join(rows) + "\n"


#: In docs/cli.md, where the generated parts go.
CLI_MARKER = re.compile(r"^<!--\s*cli:\s*(synopsis|options\s+(?P<path>[\w -]+?))\s*-->$", re.M)


def cli_page(markdown: str) -> str:
    """docs/cli.md with its markers replaced: ``<!-- cli: synopsis -->`` by the usage of
    every command, ``<!-- cli: options COMMAND -->`` by the options table of a command."""

    def generated(m: re.Match[str]) -> str:
        return cli_options(m["path"]) if m["path"] else cli_synopsis()

    with _columns(100):
        return CLI_MARKER.sub(generated, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri == "cli.md":
        return cli_page(markdown)
    return markdown


def _show(value: Any) -> str:
    import json

    from rstreams.windowed import Windowed

    def default(obj: Any) -> Any:
        # A windowed key in the flat shape results are written in (docs/windows.md).
        return obj.to_dict() if isinstance(obj, Windowed) else str(obj)

    return json.dumps(value, ensure_ascii=False, default=default)


def example_page(name: str, topic_files: dict[str, str]) -> tuple[str, str]:
    """(markdown, svg) of the example ``name``."""
    from rstreams import StreamBuilder, run
    from rstreams.planner.render import to_svg

    path = EXAMPLES / f"{name}.py"
    module = runpy.run_path(str(path))
    built = module["build"]()
    topology = built.build() if isinstance(built, StreamBuilder) else built
    inputs = {topic: str(DATA / f) for topic, f in topic_files.items()}
    result = run(topology, inputs)
    doc = (module.get("__doc__") or "").strip()
    title = doc.partition(". ")[0]
    title = title.strip().rstrip(".") or name
    binds = " ".join(
        f"--bind {t}=examples/data/{f}" if len(topic_files) > 1 else f"--input examples/data/{f}"
        for t, f in topic_files.items()
    )
    out = [
        f"# {name}: {title}\n",
        "Run it with:\n",
        f"```sh\nrstreams run examples/{name}.py {binds}\n```\n",
        "## Topology\n",
        f"![The topology of {name}]({name}.svg)\n",
        "## Code\n",
        f"```python\n{path.read_text(encoding='utf-8').rstrip()}\n```\n",
        "## Output\n",
        f"Run on examples/data/ with the in-process engine when this page was built: "
        f"{ROWS} rows of each table (key, then its final value; the largest values "
        f"first where the values are numbers).\n",
    ]
    for topic, table in result.tables.items():
        rows = list(table.items())
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for _, v in rows):
            rows.sort(key=lambda kv: (-kv[1], str(kv[0])))
        lines = [f"{_show(k)}\t{_show(v)}" for k, v in rows[:ROWS]]
        more = f"\n… {len(rows) - ROWS} more rows" if len(rows) > ROWS else ""
        out.append(
            f"`{topic}` ({len(rows)} rows):\n\n```text\n" + "\n".join(lines) + more + "\n```\n"
        )
    return "\n".join(out), to_svg(topology)


def gallery_index(names: list[str]) -> str:
    parts = [
        "# Examples\n",
        "Each example of the repository's examples/ folder: its code, the picture of its "
        "topology and what it gives on the sample data in examples/data/. The pages are "
        "made when the site is built, by running the examples.\n",
        "| example | what it shows |",
        "|---|---|",
    ]
    for name in names:
        doc = (runpy.run_path(str(EXAMPLES / f"{name}.py")).get("__doc__") or "").strip()
        first = doc.partition(". ")[0].strip().rstrip(".")
        parts.append(f"| [{name}]({name}.md) | {first} |")
    return "\n".join(parts) + "\n"


def on_files(files: Files, config: Any) -> Files:
    names = sorted(p.stem for p in EXAMPLES.glob("*.py"))
    missing = [n for n in names if n not in EXAMPLE_INPUTS]
    if missing:
        raise SystemExit(f"docs/_hooks/generate.py: no sample data known for example(s) {missing}")
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    files.append(File.generated(config, "gallery/index.md", content=gallery_index(names)))
    for name in names:
        page, svg = example_page(name, EXAMPLE_INPUTS[name])
        files.append(File.generated(config, f"gallery/{name}.md", content=page))
        files.append(File.generated(config, f"gallery/{name}.svg", content=svg))
    return files


class _DoctestsAsCode(Preprocessor):
    """Shows the doctest examples of docstrings (``>>>`` lines and what they print, up to
    a blank line) as Python console code, as they read in a terminal; otherwise Markdown
    takes them for text, and ``[('a', 1)]`` for a link."""

    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        in_example = in_fence = False
        for line in lines:
            stripped = line.lstrip()
            if stripped.startswith("```"):
                in_fence = not in_fence
            if not in_fence and not in_example and stripped.startswith(">>>"):
                indent = line[: len(line) - len(stripped)]
                out += ["", f"{indent}```pycon"]
                in_example = True
            elif in_example and not stripped:
                out += [f"{indent}```", ""]
                in_example = False
            out.append(line)
        if in_example:
            out.append(f"{indent}```")
        return out


class _DoctestExtension(Extension):
    def extendMarkdown(self, md: Any) -> None:
        md.preprocessors.register(_DoctestsAsCode(md), "rstreams-doctests", 40)


def on_config(config: Any) -> Any:
    config.markdown_extensions.append(_DoctestExtension())
    return config
