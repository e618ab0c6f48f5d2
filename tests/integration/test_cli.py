"""The `rstreams` command, run as a real subprocess."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # in ./dev test --fast (see pyproject.toml's markers)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "data" / "corpus.txt"
WORDCOUNT = ROOT / "examples" / "wordcount.py"


def rstreams(*args: str, cwd: Path | None = None, stdin: str | None = None):
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        input=stdin,
        timeout=120,
    )


def expected_counts(path: Path) -> collections.Counter:
    with path.open(encoding="utf-8") as f:
        return collections.Counter(w for line in f for w in re.findall(r"\w+", line.lower()))


def read_jsonl(path: Path) -> dict:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert all(set(r) == {"key", "value"} for r in rows)
    table = {r["key"]: r["value"] for r in rows}
    assert len(table) == len(rows), "one line per key"
    return table


def write_pipeline(tmp_path: Path, body: str, name: str = "p.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def test_run_wordcount_output_equals_counter(tmp_path):
    out = tmp_path / "counts.jsonl"
    r = rstreams("run", "--in-memory", WORDCOUNT, "--input", CORPUS, "--output", out)
    assert r.returncode == 0, r.stderr
    assert read_jsonl(out) == dict(expected_counts(CORPUS))
    assert "records in" in r.stderr and str(out) in r.stderr


def test_run_prints_top_words_without_output():
    r = rstreams("run", "--in-memory", WORDCOUNT, "--input", CORPUS, "--top", "3")
    assert r.returncode == 0, r.stderr
    top = expected_counts(CORPUS).most_common(3)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("word-counts: top 3 of")
    got = [line.split() for line in lines[1:4]]
    assert got == [[w, str(c)] for w, c in top]


def test_run_quiet_prints_nothing_but_writes(tmp_path):
    out = tmp_path / "c.jsonl"
    r = rstreams("run", "--in-memory", WORDCOUNT, "--input", CORPUS, "--output", out, "-q")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    assert out.exists()


def test_run_reads_stdin(tmp_path):
    out = tmp_path / "c.jsonl"
    r = rstreams("run", "--in-memory", WORDCOUNT, "--input", "-", "--output", out, stdin="b a\na\n")
    assert r.returncode == 0, r.stderr
    assert read_jsonl(out) == {"a": 2, "b": 1}


def test_bind_two_sources(tmp_path):
    p = write_pipeline(
        tmp_path,
        """
        from rstreams import StreamBuilder
        def build():
            b = StreamBuilder("two")
            a = b.source("a")
            a.merge(b.source("b")).keyBy(lambda v: v).count().sink("counts")
            return b
        """,
    )
    (tmp_path / "a.txt").write_text("x\ny\n")
    (tmp_path / "b.txt").write_text("x\n")
    out = tmp_path / "o.jsonl"
    r = rstreams(
        "run",
        "--in-memory",
        p,
        "--bind",
        f"a={tmp_path / 'a.txt'}",
        "--bind",
        f"b={tmp_path / 'b.txt'}",
        "--output",
        out,
    )
    assert r.returncode == 0, r.stderr
    assert read_jsonl(out) == {"x": 2, "y": 1}
    r = rstreams("run", p, "--input", tmp_path / "a.txt")
    assert r.returncode == 2
    assert "--input binds the only source topic" in r.stderr and "--bind" in r.stderr


def test_describe_and_graph(tmp_path):
    r = rstreams("describe", WORDCOUNT)
    assert r.returncode == 0
    assert r.stdout.startswith("Topology: wordcount\n")
    assert "wordcount-sentences-count-3-shuffle" in r.stdout
    for ext, magic in ((".svg", b"<svg"), (".png", b"\x89PNG"), (".dot", b"digraph")):
        out = tmp_path / f"wc{ext}"
        r = rstreams("graph", WORDCOUNT, "-o", out)
        assert r.returncode == 0, r.stderr
        assert magic in out.read_bytes()[:400]
    r = rstreams("graph", WORDCOUNT, "-o", tmp_path / "wc.gif")
    assert r.returncode == 2 and "can not render" in r.stderr


@pytest.mark.parametrize("command", [[], ["run"], ["graph"], ["describe"]])
def test_help_everywhere(command):
    r = rstreams(*command, "--help")
    assert r.returncode == 0
    assert r.stdout.startswith("usage: rstreams")


def test_version_and_no_command():
    assert rstreams("--version").stdout.startswith("rstreams ")
    r = rstreams()
    assert r.returncode == 2 and "usage:" in r.stderr


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("x = 1\n", r"defines no build\(\) function"),
        (
            "def build():\n    return [1]\n",
            "must return a Topology or a StreamBuilder; got list instead",
        ),
        (
            "def build():\n    raise KeyError('boom')\n",
            r"build\(\) in .* raised at p.py:2: KeyError",
        ),
        ("import no_such_module_xyz\n", "raised while loading at p.py:1: ModuleNotFoundError"),
        (
            "from rstreams import StreamBuilder\ndef build():\n    return StreamBuilder('j')\n",
            "does not compile: job 'j' is an empty topology",
        ),
    ],
)
def test_bad_pipeline_files(tmp_path, body, message):
    p = write_pipeline(tmp_path, body)
    r = rstreams("describe", p)
    assert r.returncode == 3
    assert re.search(message, r.stderr), r.stderr


def test_missing_pipeline_and_input(tmp_path):
    r = rstreams("describe", tmp_path / "nope.py")
    assert r.returncode == 3 and "does not exist" in r.stderr
    r = rstreams("run", WORDCOUNT, "--input", tmp_path / "missing.txt")
    assert r.returncode == 2 and "missing.txt' does not exist" in r.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # --backend spark itself works (tests/spark/test_cli_spark.py); its options
        # need it.
        (["--master", "local[2]"], "--master and --conf need --backend spark"),
        (["--conf", "spark.x=1"], "--master and --conf need --backend spark"),
        (["--streaming"], "--streaming and --checkpoint need --backend spark"),
        # --broker works (tests/redis/test_run_redis.py) on the durable runtime, and with
        # --backend spark for Redis streams (tests/spark/test_redis_spark.py).
        (["--broker", "redis://localhost", "--in-memory"], "--broker keeps the job of the"),
    ],
)
def test_not_yet_available_flags_exit_2(flags, message):
    r = rstreams("run", WORDCOUNT, "--input", CORPUS, *flags)
    assert r.returncode == 2 and message in r.stderr


def test_user_function_failure_exit_1_names_step_and_offset(tmp_path, failing_pipeline):
    p = failing_pipeline(tmp_path / "p.py")
    data = tmp_path / "n.txt"
    data.write_text("1\n2\n0\n5\n")
    r = rstreams("run", "--in-memory", p, "--input", data)
    assert r.returncode == 1
    assert "step 'numbers-map-1'" in r.stderr
    assert "numbers[0]@2" in r.stderr  # topic[queue]@offset of the bad line
    assert "ZeroDivisionError" in r.stderr and "parse (p.py:3)" in r.stderr


def test_on_error_skip_keeps_going(tmp_path, failing_pipeline):
    p = failing_pipeline(tmp_path / "p.py")
    data = tmp_path / "n.txt"
    data.write_text("1\n2\n0\n5\n")
    out = tmp_path / "o.jsonl"
    r = rstreams("run", "--in-memory", p, "--input", data, "--output", out, "--on-error", "skip")
    assert r.returncode == 0, r.stderr
    # 10 // 1 = 10 and 10 // 5 = 2 have key 0, 10 // 2 = 5 has key 1; the "0" line is skipped
    assert read_jsonl(out) == {0: 12, 1: 5}
    assert "1 skipped" in r.stderr
