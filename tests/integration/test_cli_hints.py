"""What the durable runtime tells a command-line user: where its dead letters are, its
state without the runtime's own entries, and progress that fits a followed input."""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from rstreams.cli import main
from rstreams.live import RunProgress
from rstreams.runtime.results import Progress

WINDOWED = """
from rstreams import StreamBuilder, TumblingWindow
def build():
    b = StreamBuilder("wc")
    (b.source("lines")
       .selectTimestamp(lambda line: int(line.split()[0]))
       .keyBy(lambda line: line.split()[1])
       .window(TumblingWindow(1000))
       .count(name="per-second")
       .sink("counts"))
    return b
"""


def rstreams(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_durable_dead_letters_warning_gives_a_command_that_reads_them(tmp_path, failing_pipeline):
    p = failing_pipeline(tmp_path / "div.py")
    data = write(tmp_path / "n.txt", "1\n0\n2\n0\n")
    r = rstreams(
        "run", p, "--input", data, "--on-error", "dead-letter", "--data-dir", "jobs",
        "--workers", 1, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "2 dead-lettered" in r.stderr
    assert "worker logs" not in r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if "dead-lettered to the topic" in ln]
    assert "'div-dead-letter'" in line
    command = line.split("`")[1]
    assert command.startswith("rstreams consume div-dead-letter")
    # Another job beside it: the command still finds the job that has the topic.
    other = write(tmp_path / "n2.txt", "x\n")
    r = rstreams("run", tmp_path / "div.py", "--input", other, "--data-dir", "jobs2", cwd=tmp_path)
    r = rstreams(*shlex.split(command)[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    letters = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert [(d["offset"], d["value"]) for d in letters] == [(1, "0"), (3, "0")]


WORDS = """
from rstreams import StreamBuilder
def build():
    b = StreamBuilder("wl")
    b.source("lines").flatMap(str.split).keyBy(lambda w: w).count().sink("counts")
    return b
"""


def test_a_bad_input_line_is_named_by_file_and_line_by_the_durable_runtime(tmp_path):
    """Invalid UTF-8 at line 45,001 (the 3rd chunk of 20,000 lines, on a queue of its
    own): the error names the file and the line beside the log position, and a dead
    letter keeps them with the bytes, in base64 (not a Python repr)."""
    import base64

    p = write(tmp_path / "wl.py", WORDS)
    rows = [b"w%d y" % (i % 7) for i in range(1, 50_001)]
    rows[45_000] = b"caf\xe9 x"
    (tmp_path / "in.txt").write_bytes(b"\n".join(rows) + b"\n")
    r = rstreams("run", p, "--input", "in.txt", "--data-dir", "jobs", "--workers", 2, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert re.search(r"at lines\[\d\]@\d+: in\.txt line 45001 \(key=None", r.stderr), r.stderr
    r = rstreams(
        "run", p, "--input", "in.txt", "--data-dir", "dl", "--workers", 2,
        "--on-error", "dead-letter", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = rstreams("consume", "wl-dead-letter", "--from-beginning", "--data-dir", "dl", cwd=tmp_path)
    (letter,) = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert (letter["file"], letter["line"]) == (str((tmp_path / "in.txt").resolve()), 45001)
    assert letter["value_encoding"] == "base64"
    assert base64.b64decode(letter["value"]) == b"caf\xe9 x"


def test_state_dump_hides_the_stream_time_of_a_windowed_store(capsys, tmp_path):
    p = write(tmp_path / "wc.py", WINDOWED)
    data = write(tmp_path / "in.txt", "0 a\n10 b\n20 a\n")
    jobs = tmp_path / "jobs"
    r = rstreams("run", p, "--input", data, "--data-dir", jobs, "--workers", 1, "-q")
    assert r.returncode == 0, r.stderr
    store = "wc-per-second-store"
    assert main(["state", "dump", store, "--data-dir", str(jobs)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows and all(row["key"] != ["t"] for row in rows), rows
    assert sorted(row["key"][1:] for row in rows) == [["a", 0], ["b", 0]]
    # The Python reader can still show them.
    from rstreams.state.inspect import iter_store

    keys = [k for _, k, _ in iter_store(jobs, "wc", store, internal=True)]
    assert ("t",) in keys


def test_run_progress_never_says_more_than_all_of_the_input():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False)
    progress = RunProgress(enabled=True, every=0.0, console=console)
    progress(Progress(300, 0, 150, 100, 1.0))
    assert "100% of input" in out.getvalue() and "150%" not in out.getvalue()


def test_follow_progress_measures_against_the_growing_file(tmp_path):
    from rstreams import run
    from rstreams.loader import load_topology

    p = write(
        tmp_path / "wc.py",
        """
        from rstreams import StreamBuilder
        def build():
            b = StreamBuilder("wc")
            b.source("lines").keyBy(lambda w: w).count().sink("counts")
            return b
        """,
    )
    data = write(tmp_path / "in.txt", "a\nb\n")
    first = data.stat().st_size
    seen: list[Progress] = []

    def progress(s: Progress) -> None:
        # Event-driven, no clock: grow the file once the first part is read, and end
        # the followed run (as Ctrl-C does) once the appended part is read too.
        seen.append(s)
        if s.bytes_read == first and data.stat().st_size == first:
            with data.open("a") as f:
                f.write("c\nd\ne\n")
        elif s.bytes_read == data.stat().st_size > first and s.records_out >= 5:
            raise KeyboardInterrupt

    result = run(
        load_topology(str(p)),
        {"lines": str(data)},
        data_dir=str(tmp_path / "jobs"),
        pipeline=str(p),
        workers=1,
        follow=True,
        progress=progress,
    )
    assert result.tables["counts"] == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}
    assert seen[-1].bytes_read == seen[-1].bytes_total == data.stat().st_size
    assert all(s.bytes_total is not None and s.bytes_read <= s.bytes_total for s in seen)


# -- a newcomer's mistakes: each one line on stderr, naming what is wrong and what to do --

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"


def one_line_error(r: subprocess.CompletedProcess[str], code: int) -> str:
    """The run's stderr, checked to be one error line (no traceback, no usage block)."""
    assert r.returncode == code, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


def test_a_mistyped_option_is_one_line_with_the_close_option(tmp_path):
    err = one_line_error(rstreams("run", WORDCOUNT, "--inptu", "in.txt", cwd=tmp_path), 2)
    assert err.startswith("rstreams run: error: unrecognized arguments: --inptu in.txt")
    assert "(did you mean --input?)" in err and "`rstreams run --help` lists the options" in err
    err = one_line_error(rstreams("run", WORDCOUNT, "--on-error", "ignore", cwd=tmp_path), 2)
    assert "invalid choice: 'ignore' (choose from 'fail', 'skip', 'dead-letter')" in err
    err = one_line_error(rstreams("topics", "list", "--jb", "x", cwd=tmp_path), 2)
    assert err.startswith("rstreams topics: error:") and "(did you mean --job?)" in err
    r = rstreams("spark", "pack-env", "-o", "env.tar.gz", "--compres-level", 1, cwd=tmp_path)
    err = one_line_error(r, 2)  # (a command's command: its own options)
    assert err.startswith("rstreams spark pack-env: error: unrecognized arguments")
    assert "(did you mean --compress-level?)" in err
    err = one_line_error(rstreams("rn", WORDCOUNT, cwd=tmp_path), 2)
    assert "invalid choice: 'rn'" in err and "`rstreams --help` lists the commands" in err


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "from rstreams import StreamBuilder\n\ndef build()\n    return StreamBuilder('j')\n",
            "pipeline file 'p.py' is not valid Python: SyntaxError at p.py:3: expected ':'",
        ),
        (
            "from rstreams import StreamBuilder\ndef build():\n    b = StreamBuilder('j')\n"
            "    b.source('lines').sink('out')\n",
            "build() in 'p.py' returned None: it must return its StreamBuilder (or a "
            "Topology); end it with `return b`",
        ),
        (
            "from rstreams import StreamBuilder\ndef build(config):\n"
            "    return StreamBuilder('j')\n",
            "build() in 'p.py' is called with no arguments, but it requires config",
        ),
    ],
)
def test_a_pipeline_file_that_does_not_load_says_why_in_one_line(tmp_path, body, message):
    (tmp_path / "p.py").write_text(body)
    err = one_line_error(rstreams("describe", "p.py", cwd=tmp_path), 3)
    assert message in err, err


@pytest.mark.parametrize(
    ("step", "message"),
    [
        # Kafka Streams' habit: (key, value). The step passes the value only.
        (
            ".filter(lambda key, value: len(value) > 3)",
            "filter() calls its function as fn(value) (the record's value only, not its "
            "key), but build.<locals>.<lambda> (p.py:5) takes (key, value)",
        ),
        (
            ".flatMap(str.split).keyBy(lambda w: w).reduce(lambda acc: acc)",
            "reduce() calls its function as fn(acc, value), but build.<locals>.<lambda> "
            "(p.py:5) takes (acc)",
        ),
        (
            ".keyBy(len).aggregate(lambda acc: acc, lambda acc, v: acc)",
            "aggregate() calls its function as initializer(), but build.<locals>.<lambda> "
            "(p.py:5) takes (acc)",
        ),
    ],
)
def test_a_function_called_with_other_arguments_is_refused_when_built(tmp_path, step, message):
    """Before, the first record failed at run time (exit 1), with a hint to skip the
    records that fail: every record would."""
    p = write(
        tmp_path / "p.py",
        f"""
        from rstreams import StreamBuilder
        def build():
            b = StreamBuilder("j")
            b.source("lines"){step}.sink("out")
            return b
        """,
    )
    data = write(tmp_path / "in.txt", "hello world\n")
    err = one_line_error(rstreams("run", p, "--input", data, "--in-memory", cwd=tmp_path), 3)
    assert "raised at p.py:5: InvalidFunctionError: " + message in err, err


def test_an_input_directory_is_named_as_one_on_the_durable_runtime(tmp_path):
    (tmp_path / "inbox").mkdir()
    r = rstreams("run", WORDCOUNT, "--input", "inbox", "--workers", 1, cwd=tmp_path)
    err = one_line_error(r, 2)
    assert "input 'inbox' is a directory; give a file (one record per line)" in err
    assert not (tmp_path / ".rstreams" / "wordcount").exists()  # (refused before any work)


TWO_SINKS = """
from rstreams import StreamBuilder
def build():
    b = StreamBuilder("two")
    words = b.source("lines").flatMap(str.split)
    words.keyBy(lambda w: w).count().sink("out")
    words.map(str.upper).sink("out"{options})
    return b
"""


def test_two_sinks_of_one_topic_must_write_it_alike(tmp_path):
    """Before, the run ended with `invalid JSON ...: b'HELLO'` (the final table read the
    str records with the first sink's JSON serde), naming neither step nor topic."""
    data = write(tmp_path / "in.txt", "hello world\n")
    p = write(tmp_path / "p.py", TWO_SINKS.format(options=', "str"'))
    err = one_line_error(rstreams("run", p, "--input", data, "--in-memory", cwd=tmp_path), 3)
    assert (
        "raised at p.py:7: TopologyError: topic 'out' is written by sink step "
        "'lines-sink-5' with other settings (serializer 'json' there, 'str' here)" in err
    ), err
    assert "write it the same way, or sink to another topic" in err
    p = write(tmp_path / "p.py", TWO_SINKS.format(options=", queues=3"))
    r = rstreams("describe", p, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.search(r"\n    out +sink +queues: 3\n", r.stdout), r.stdout  # (was: ?)
    r = rstreams("run", p, "--input", data, "--in-memory", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert 'None   "WORLD"' in r.stdout and "hello  1" in r.stdout  # (no key: one row)


def test_a_redis_server_that_is_not_there_says_what_to_check(tmp_path):
    pytest.importorskip("redis")
    data = write(tmp_path / "in.txt", "hello\n")
    r = rstreams("run", WORDCOUNT, "--input", data, "--broker", "redis://u:pw@127.0.0.1:1/0")
    err = one_line_error(r, 2)
    assert "cannot reach Redis at 127.0.0.1:1: " in err
    assert "is a redis-server (7.0 or newer) running there, and is the URL right " in err
    assert "(redis://u:***@127.0.0.1:1/0)?" in err and "pw" not in err


def test_the_spark_backend_without_java_says_so_in_one_line(tmp_path):
    pytest.importorskip("pyspark")
    import os

    data = write(tmp_path / "in.txt", "hello\n")
    (tmp_path / "empty").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    # No java on PATH (nothing is), no spark-env.sh that could set JAVA_HOME.
    env.update(PATH=str(tmp_path / "empty"), SPARK_CONF_DIR=str(tmp_path / "empty"))
    args = [sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), "--input", str(data)]
    r = subprocess.run(
        [*args, "--backend", "spark"], capture_output=True, text=True, env=env, timeout=300
    )
    err = one_line_error(r, 2)  # (before: Spark's launcher's "JAVA_HOME is not set" first)
    assert "no Java found (no java on PATH and JAVA_HOME is not set)" in err
    assert "needs Java 17 or later: install it" in err
    env["JAVA_HOME"] = str(tmp_path / "nojdk")
    r = subprocess.run(
        [*args, "--backend", "spark"], capture_output=True, text=True, env=env, timeout=300
    )
    err = one_line_error(r, 2)
    assert f"JAVA_HOME is '{tmp_path / 'nojdk'}', which has no bin/java" in err
