"""The code in README.md and docs/*.md runs, so a page that went stale fails CI.

What runs, per page (README.md, docs/*.md), in the order of the page, in a fresh
temporary directory that holds a link to the checkout's ``examples/``:

- A ```python block is executed; the blocks of one page share one namespace (a later
  block may use what an earlier one built). A block that is a pytest module (it imports
  pytest and defines ``test_`` functions) is run by pytest instead, and must pass.
  When a ```text block follows a python block (only blank lines between), that block is
  what the code prints: stdout is compared with it, line by line (trailing spaces
  ignored).
- A ```console block: each line starting with ``$ `` is a shell command (``\\``
  continues it), the lines after it, up to the next ``$ ``, what it prints. ``rstreams``
  runs as ``python -m rstreams`` of this interpreter. The command must exit 0, unless
  what it prints shows ``rstreams: error:`` (then it must fail). Its output (stdout,
  then stderr) is compared with the lines shown when the doc shows any: a ``...`` line
  matches any number of lines, and durations, rates and counts of updates out (``2,941
  out in 0.10s (63,006 records/s)``) match any value.
- A ```sh, ```shell or ```bash block: every line is a command (``#`` comments
  dropped, ``\\`` continues it); only its exit code is checked.

An HTML comment right before a block changes this, in the page's source:

- ``<!-- snippet: skip (REASON) -->``: the block does not run here (it needs a
  cluster, installs packages, shows placeholders...). The reason is required.
- ``<!-- snippet: slow (REASON) -->``: the block runs only in the page's test marked
  slow (the Spark ones; ``-m "not slow"`` leaves them out, CI runs them).
- ``<!-- snippet: setup: COMMAND -->``: a shell command run (and required to succeed)
  before the block, to make the files it works on; may repeat.
- ``<!-- snippet: redis (REASON) -->``: the block needs a Redis server. The page's test
  starts a real ``redis-server`` (tests/helpers/redisserver.py) on a free port before its
  first such block, with a fresh data directory, and stops it after the page; the
  page's blocks share it. The docs show the address a reader would use,
  ``redis://127.0.0.1:6379/0``, and ``redis-cli`` with no options: in the block and its
  setup commands, ``127.0.0.1:6379`` becomes the server's address and ``redis-cli``
  ``redis-cli -p PORT --no-raw`` (``--no-raw``: the reply as a terminal shows it); in what
  a command prints, the server's address reads ``127.0.0.1:6379`` again, and Redis entry
  ids (``1764129600123-0``) match any value. ``HOME`` is a fresh directory on such a
  page, so ``~/...`` files a block writes stay in the test.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from tests.helpers.extras import importable
from tests.helpers.redisserver import RedisServer

ROOT = Path(__file__).resolve().parents[2]

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "console", "sh", "shell", "bash"}
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")
COMMAND_TIMEOUT = 600  # a hang guard only: a Spark example on a loaded machine can take minutes
DOC_REDIS = "127.0.0.1:6379"  # the address the docs show


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    expected: str | None = None  # the ```text block after a python block
    skip: str | None = None
    slow: str | None = None
    redis: str | None = None
    setup: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse(path: Path) -> list[Block]:
    """The fenced blocks of a page, with their markers and the output shown after them."""
    lines = path.read_text(encoding="utf-8").split("\n")
    page = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    blocks: list[Block] = []
    all_fenced: list[tuple[int, int, str, str]] = []  # (start, end, lang, code)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        all_fenced.append((i, j, m.group(1), "\n".join(lines[i + 1 : j])))
        i = j + 1
    for n, (start, end, lang, code) in enumerate(all_fenced):
        if lang not in RUNNABLE:
            continue
        block = Block(page, start + 1, lang, code)
        k = start - 1
        while k >= 0 and (marker := MARKER.match(lines[k])):
            text = marker.group(1)
            if text.startswith("skip"):
                block.skip = reason(text, "skip", block)
            elif text.startswith("slow"):
                block.slow = reason(text, "slow", block)
            elif text.startswith("redis"):
                block.redis = reason(text, "redis", block)
            elif text.startswith("setup:"):
                block.setup.insert(0, text.removeprefix("setup:").strip())
            else:
                raise AssertionError(f"{block.where}: unknown snippet marker {text!r}")
            k -= 1
        if lang == "python" and n + 1 < len(all_fenced):
            nstart, _, nlang, ncode = all_fenced[n + 1]
            if nlang == "text" and all(not s.strip() for s in lines[end + 1 : nstart]):
                block.expected = ncode
        blocks.append(block)
    return blocks


def reason(text: str, word: str, block: Block) -> str:
    m = re.fullmatch(rf"{word}\s*\((.+)\)", text)
    assert m, f"{block.where}: write the reason: <!-- snippet: {word} (why) -->"
    return m.group(1)


# -- running -----------------------------------------------------------------------


def shell_env(bin_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    env.pop("COLUMNS", None)
    return env


def make_workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A temporary cwd with examples/ reachable and ``rstreams`` on PATH."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "rstreams"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m rstreams "$@"\n')
    shim.chmod(0o755)
    return work, shell_env(bin_dir)


def sh(command: str, cwd: Path, env: dict[str, str], last_rc: int = 0) -> tuple[int, str, str]:
    # `(exit N);` first, so that a shown `echo $?` prints the previous command's code.
    proc = subprocess.run(
        ["bash", "-c", f"(exit {last_rc}); {command}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout, proc.stderr


def console_steps(code: str) -> list[tuple[str, list[str]]]:
    """``$ `` commands (continuations joined) and the lines shown after each."""
    steps: list[tuple[str, list[str]]] = []
    lines = code.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            assert steps, f"output before the first command: {line!r}"
            steps[-1][1].append(line)
            i += 1
            continue
        command = line[2:]
        while command.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command.rstrip()[:-1] + " " + lines[i].strip()
        steps.append((command, []))
        i += 1
    return steps


def sh_commands(code: str) -> list[str]:
    commands, current = [], ""
    for line in code.split("\n"):
        line = re.sub(r"\s+#.*$", "", line).strip() if not line.startswith("#") else ""
        if not line and not current:
            continue
        current += line
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        commands.append(current)
        current = ""
    return commands


TIMES = [
    (re.compile(r", [\d,]+ out in "), ", <N> out in "),  # updates per commit vary
    (re.compile(r"\bin \d+(?:\.\d+)?s\b"), "in <T>s"),
    (re.compile(r"\([\d,.]+ records/s\)"), "(<N> records/s)"),
    (re.compile(r"\b\d{13}-\d+\b"), "<ID>"),  # a Redis entry id from the server clock
]


# The plain progress line a run prints on stderr every 5 s when it is no terminal: a
# loaded machine makes a docs example run that long, so it can appear or not.
PROGRESS_LINE = re.compile(r"^  [\d,]+ records in, .*\(\d[\d,]*s\)\n", re.MULTILINE)


def normalize(line: str) -> str:
    line = line.rstrip()
    for pattern, repl in TIMES:
        line = pattern.sub(repl, line)
    return line


def lines_match(expected: list[str], actual: list[str]) -> bool:
    """``expected`` equals ``actual``, a ``...`` line standing for any lines."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(lines_match(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and lines_match(expected[1:], actual[1:])


class PageRedis:
    """The page's redis-server: started at its first ``redis`` block, stopped after the page."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.server: RedisServer | None = None

    def address(self) -> str:
        if self.server is None:
            self.server = RedisServer(self.directory).start()
        return f"127.0.0.1:{self.server.port}"

    def rewrite(self, block: Block) -> Block:
        """The block and its setup aimed at this server (see the module's docstring)."""
        address = self.address()
        cli = f"redis-cli -h 127.0.0.1 -p {address.split(':')[1]} --no-raw"

        def local(text: str) -> str:
            return re.sub(r"\bredis-cli\b", cli, text.replace(DOC_REDIS, address))

        return replace(block, code=local(block.code), setup=[local(c) for c in block.setup])

    def as_shown(self, printed: str) -> str:
        """What a command printed, with the server's address as the docs show it."""
        return printed.replace(self.address(), DOC_REDIS) if self.server else printed

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def run_console(
    block: Block, cwd: Path, env: dict[str, str], redis: PageRedis | None = None
) -> None:
    rc = 0
    for command, shown in console_steps(block.code):
        rc, out, err = sh(command, cwd, env, rc)
        shown_text = "\n".join(shown)
        wants_error = "rstreams: error:" in shown_text
        printed = (out + PROGRESS_LINE.sub("", err)).rstrip("\n")
        if redis is not None:
            printed = redis.as_shown(printed)
        context = f"{block.where}: $ {command}\n--- printed (exit {rc}):\n{printed}"
        if wants_error:
            assert rc != 0, f"{context}\n--- the doc shows an error, the command succeeded"
        else:
            assert rc == 0, context
        expected = [normalize(s) for s in shown]
        while expected and not expected[-1]:
            expected.pop()
        if expected:
            actual = [normalize(s) for s in printed.split("\n")] if printed else []
            assert lines_match(expected, actual), f"{context}\n--- the doc shows:\n{shown_text}"


def run_sh(block: Block, cwd: Path, env: dict[str, str]) -> None:
    for command in sh_commands(block.code):
        rc, out, err = sh(command, cwd, env)
        assert rc == 0, f"{block.where}: {command}\n--- exit {rc}:\n{out}{err}"


PYTEST_MODULE = re.compile(r"^import pytest$.*^def test_", re.MULTILINE | re.DOTALL)


def run_pytest_module(block: Block, cwd: Path, env: dict[str, str]) -> None:
    module = cwd / f"test_snippet_{block.line}.py"
    module.write_text(block.code + "\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", module.name],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    assert proc.returncode == 0, f"{block.where}: pytest of the block failed:\n{proc.stdout}"
    assert " passed" in proc.stdout, proc.stdout


def run_python(block: Block, namespace: dict[str, object]) -> None:
    # Named snippet.py: errors that name the user's function show `snippet.py:LINE`.
    code = compile(block.code, "snippet.py", "exec")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, namespace)
    if block.expected is not None:
        got = [s.rstrip() for s in out.getvalue().rstrip("\n").split("\n")]
        want = [s.rstrip() for s in block.expected.rstrip("\n").split("\n")]
        assert got == want, (
            f"{block.where}: the block printed\n"
            + "\n".join(got)
            + "\n--- the doc shows\n"
            + "\n".join(want)
        )


def run_page(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow: bool) -> None:
    blocks = parse(page)
    if any(b.redis and not b.skip for b in blocks) and not importable("redis.client"):
        pytest.skip("the page's Redis blocks need pip install 'rstreams[redis]'")
    cwd, env = make_workdir(tmp_path)
    monkeypatch.chdir(cwd)
    redis = PageRedis(tmp_path / "redis")
    if any(b.redis for b in blocks):
        # `~/.rstreams-redis` and the like, written by a block, stay in the test.
        (tmp_path / "home").mkdir()
        env["HOME"] = str(tmp_path / "home")
        monkeypatch.setenv("HOME", env["HOME"])
    namespace: dict[str, object] = {"__name__": "__snippet__"}
    try:
        for block in blocks:
            if block.skip or (block.slow and not slow):
                continue
            local = redis.rewrite(block) if block.redis else block
            run_block(local, cwd, env, namespace, redis)
    finally:
        redis.stop()


def run_block(
    block: Block, cwd: Path, env: dict[str, str], namespace: dict[str, object], redis: PageRedis
) -> None:
    for command in block.setup:
        rc, out, err = sh(command, cwd, env)
        assert rc == 0, f"{block.where}: setup {command}\n--- exit {rc}:\n{out}{err}"
    if block.lang == "python" and PYTEST_MODULE.search(block.code):
        run_pytest_module(block, cwd, env)
    elif block.lang == "python":
        run_python(block, namespace)
    elif block.lang == "console":
        run_console(block, cwd, env, redis)
    else:
        run_sh(block, cwd, env)


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


#: The pages whose test is in ./dev test --fast (see pyproject.toml's markers): the front
#: page (in-memory and durable runs, Redis) and the first steps.
FAST_PAGES = {"README.md", "docs/getting-started.md"}


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=[pytest.mark.fast] if page_id(p) in FAST_PAGES else []) for p in PAGES],
    ids=page_id,
)
def test_page(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's blocks run and print what it shows (its slow blocks left out)."""
    run_page(page, tmp_path, monkeypatch, slow=False)


SLOW_PAGES = [p for p in PAGES if any(b.slow and not b.skip for b in parse(p))]


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW_PAGES, ids=page_id)
def test_page_with_slow_blocks(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's blocks, its slow ones (Spark) included."""
    run_page(page, tmp_path, monkeypatch, slow=True)


def test_every_skip_is_marked_with_a_reason() -> None:
    """Markers parse (a skip without a reason fails), and some snippets do run."""
    blocks = [b for p in PAGES for b in parse(p)]
    assert blocks
    runnable = [b for b in blocks if not b.skip]
    assert len(runnable) > len(blocks) / 2, [b.where for b in blocks if b.skip]
    assert all(b.skip.strip() for b in blocks if b.skip)


def test_parser_reads_markers_and_output(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- snippet: skip (needs a cluster) -->\n"
        "```console\n$ rstreams run x.py --master spark://h:7077\n```\n\n"
        "```python\nprint(1)\n```\n\n```text\n1\n```\n"
        "<!-- snippet: setup: touch a.txt -->\n<!-- snippet: slow (Spark) -->\n"
        "```sh\nrstreams run a.py \\\n  --input a.txt  # comment\n```\n"
    )
    blocks = parse(page)
    assert [(b.lang, b.skip, b.slow, b.expected) for b in blocks] == [
        ("console", "needs a cluster", None, None),
        ("python", None, None, "1"),
        ("sh", None, "Spark", None),
    ]
    assert blocks[2].setup == ["touch a.txt"]
    assert sh_commands(blocks[2].code) == ["rstreams run a.py  --input a.txt"]
    assert console_steps("$ a \\\n   b\nout\n$ c") == [("a  b", ["out"]), ("c", [])]
    assert lines_match(["x", "...", "z"], ["x", "y", "y", "z"])
    assert not lines_match(["x", "z"], ["x", "y", "z"])
    assert normalize("done: 6 records in, 2 out in 0.09s (71,717 records/s)") == (
        "done: 6 records in, <N> out in <T>s (<N> records/s)"
    )


def test_redis_blocks_are_aimed_at_the_page_server(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- snippet: setup: redis-cli SET k v -->\n<!-- snippet: redis (a server) -->\n"
        "```console\n$ rstreams topics list --broker redis://127.0.0.1:6379/0\n```\n"
    )
    (block,) = parse(page)
    assert block.redis == "a server"
    redis = PageRedis(tmp_path / "redis")
    try:
        local = redis.rewrite(block)
        port = redis.server.port if redis.server else 0
        assert local.code == f"$ rstreams topics list --broker redis://127.0.0.1:{port}/0"
        assert local.setup == [f"redis-cli -h 127.0.0.1 -p {port} --no-raw SET k v"]
        rc, out, _ = sh(local.setup[0], tmp_path, dict(os.environ))
        assert (rc, out) == (0, "OK\n")
        assert redis.as_shown(f"redis://127.0.0.1:{port}/0") == "redis://127.0.0.1:6379/0"
    finally:
        redis.stop()
    assert normalize('1) "1764129600123-0"') == '1) "<ID>"'


def test_a_progress_line_on_stderr_is_left_out_and_nothing_else() -> None:
    err = (
        "  1,500 records in, 20 out, lag 7, 750 records/s, 2 workers, 40% of input (5s)\n"
        "  the  3383\n"
        "done: 6,217 records in, 2,941 out in 6.10s (1,019 records/s)\n"
    )
    assert PROGRESS_LINE.sub("", err) == err.split("\n", 1)[1]
