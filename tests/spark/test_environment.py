"""Spark from any environment: the executors run the interpreter rstreams runs on (never
PATH's ``python3``), a session whose executors can't import rstreams is refused with a
message naming their interpreter, an unreachable master fails fast, and no run leaves a
JVM or Python daemon behind.

Every test here runs under the lying PATH of conftest.py: ``python3`` and ``python``
first on PATH are stubs that fail.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.processes import assert_nothing_left, marked_env, marked_processes

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RSTREAMS = Path(sys.executable).parent / "rstreams"  # the console script pip installed
WORD = re.compile(r"\w+")


def top_words(text: str, n: int) -> list[tuple[str, int]]:
    counts = collections.Counter(
        w for line in text.splitlines() for w in WORD.findall(line.lower())
    )
    return counts.most_common(n)


def printed_top(stdout: str) -> dict[str, int]:
    """The ``--top`` table the CLI prints: {word: count}."""
    rows = [ln.split() for ln in stdout.splitlines()[1:] if ln.startswith("  ")]
    return {word: int(count) for word, count in rows}


def test_the_path_lies() -> None:
    # The premise of this module: PATH's python3 can not run anything.
    r = subprocess.run(["python3", "-c", "print(1)"], capture_output=True, text=True)
    assert r.returncode == 97 and "stub" in r.stderr
    assert "PYSPARK_PYTHON" not in os.environ


# (examples/wordcount_spark.py, the same with built-in functions, is run and checked
# the same way, on its --output, by test_cli_spark.py's test_cli_runs_wordcount_on_spark)
@pytest.mark.parametrize("example", ["wordcount"])
def test_cli_wordcount_matches_embedded_with_a_lying_path(example: str, tmp_path: Path) -> None:
    corpus = ROOT / "examples" / "data" / "corpus.txt"
    mark = uuid.uuid4().hex
    common = ["run", ROOT / "examples" / f"{example}.py", "--input", corpus, "--top", "15"]
    spark = subprocess.run(
        [RSTREAMS, *common, "--backend", "spark", "--master", "local[2]"],
        capture_output=True,
        text=True,
        timeout=300,
        env=marked_env(mark),
        cwd=tmp_path,
    )
    assert spark.returncode == 0, spark.stderr[-3000:]
    embedded = subprocess.run(
        [RSTREAMS, *common, "--in-memory"], capture_output=True, text=True, timeout=300
    )
    assert embedded.returncode == 0, embedded.stderr[-3000:]
    expected = dict(top_words(corpus.read_text(encoding="utf-8"), 15))
    assert printed_top(spark.stdout) == printed_top(embedded.stdout) == expected
    assert_nothing_left(mark)


API_SCRIPT = """
import collections, re, sys
from pathlib import Path
import rstreams

sys.path.insert(0, {examples!r})
import wordcount

topology = wordcount.build().build()
corpus = sys.argv[1]
words = collections.Counter(
    w for line in Path(corpus).read_text().splitlines()
    for w in re.findall(r"\\w+", line.lower())
)
# rstreams.run creates (and stops) its own session on this lying PATH.
batch = rstreams.run(topology, {{"sentences": corpus}}, backend="spark", master="local[2]")
assert batch.tables["word-counts"] == dict(words), "batch"
print("ok")
"""


def test_api_batch_with_a_lying_path(tmp_path: Path, corpus_lines: list[str]) -> None:
    # A fresh process, so that the session (and its JVM) is created under the lying PATH.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(corpus_lines[:400]) + "\n", encoding="utf-8")
    script = tmp_path / "api.py"
    script.write_text(API_SCRIPT.format(examples=str(ROOT / "examples")))
    mark = uuid.uuid4().hex
    r = subprocess.run(
        [sys.executable, script, corpus],
        capture_output=True,
        text=True,
        timeout=300,
        env=marked_env(mark),
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
    assert_nothing_left(mark)


def test_api_streaming_with_a_lying_path_continues_from_its_checkpoint(
    tmp_path: Path, corpus_lines: list[str], example_topology: Any, spark: Any
) -> None:
    """Structured Streaming, twice on one checkpoint, on a session rstreams created
    under the lying PATH (conftest.py's: get_session, with python3 on PATH a stub and no
    PYSPARK_PYTHON, as a fresh process would have it)."""
    from rstreams.runtime.spark import run_spark

    text = "\n".join(corpus_lines[:400]) + "\n"
    words = collections.Counter(w for w in WORD.findall(text.lower()))
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.txt").write_text(text, encoding="utf-8")
    topology, ckpt = example_topology("wordcount"), str(tmp_path / "ckpt")
    inputs = {"sentences": str(inbox)}
    first = run_spark(topology, inputs, spark=spark, streaming=True, checkpoint=ckpt)
    (inbox / "b.txt").write_text(text, encoding="utf-8")
    second = run_spark(topology, inputs, spark=spark, streaming=True, checkpoint=ckpt)
    assert first.tables["word-counts"] == dict(words), "streaming"
    assert second.tables["word-counts"] == {w: 2 * c for w, c in words.items()}, "restart"


USER_SESSION_SCRIPT = """
import sys
from pyspark.sql import SparkSession
from rstreams import StreamBuilder
from rstreams.errors import ConfigError
from rstreams.runtime.spark import run_spark

# The user's own session, built without rstreams: PySpark takes python3 from PATH.
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
b = StreamBuilder("user-session")
b.source("lines").map(len).sink("lengths")
try:
    run_spark(b.build(), {"lines": sys.argv[1]}, spark=spark)
except ConfigError as e:
    print(e)
else:
    print("no error")
spark.stop()
"""


def test_a_user_session_whose_executors_lack_rstreams_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "lines.txt"
    data.write_text("a\nbb\n")
    script = tmp_path / "user.py"
    script.write_text(USER_SESSION_SCRIPT)
    r = subprocess.run([sys.executable, script, data], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    message = r.stdout.strip()
    assert message.startswith("the Spark executors could not run Python with 'python3'"), message
    assert "spark.pyspark.python" in message and "PYSPARK_PYTHON" in message
    assert "spark.archives" in message


SLOW = """
import time
from rstreams import StreamBuilder
def slow(line):
    time.sleep(0.2)
    return line
def build():
    b = StreamBuilder("slow")
    b.source("lines").map(slow).keyBy(lambda v: v).count().sink("counts")
    return b
"""


def test_an_interrupted_run_leaves_no_process(tmp_path: Path) -> None:
    # (A failed run leaves none either: test_cli_spark.py's
    # test_cli_spark_failure_exit_1_names_step_file_and_line checks it on its run.)
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"line {i}\n" for i in range(2000)))
    slow = tmp_path / "slow.py"
    slow.write_text(textwrap.dedent(SLOW))
    mark = uuid.uuid4().hex
    p = subprocess.Popen(
        [RSTREAMS, "run", slow, "--backend", "spark", "--master", "local[2]",
         "--input", lines],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=marked_env(mark),
    )  # fmt: skip
    try:
        # Wait until the job runs Python (a worker daemon is up), then stop the run.
        deadline = time.monotonic() + 120
        while not any("pyspark.daemon" in c for c in marked_processes(mark)):
            assert p.poll() is None, p.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the job never started Python"
            time.sleep(0.2)
        time.sleep(1)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143 and "interrupted (SIGTERM)" in err, err[-3000:]  # 128 + 15
    assert_nothing_left(mark)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_master_fails_fast_naming_the_url(tmp_path: Path) -> None:
    url = f"spark://127.0.0.1:{free_port()}"
    data = tmp_path / "lines.txt"
    data.write_text("a b\n")
    mark = uuid.uuid4().hex
    started = time.monotonic()
    r = subprocess.run(
        [RSTREAMS, "run", ROOT / "examples" / "wordcount.py", "--backend", "spark",
         "--master", url, "--input", data],
        capture_output=True, text=True, timeout=120, env=marked_env(mark),
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert r.returncode == 2, r.stderr[-3000:]
    assert f"can not reach the Spark master {url}" in r.stderr
    assert "Java" not in r.stderr
    assert elapsed < 30, elapsed
    assert_nothing_left(mark)


def test_worker_python_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    from rstreams.runtime.spark.session import worker_python

    assert worker_python() == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    assert worker_python() == "/opt/py/bin/python"
    conf = {"spark.pyspark.python": "./environment/bin/python"}
    assert worker_python(conf) == "./environment/bin/python"
    assert json.dumps(worker_python({})) == json.dumps("/opt/py/bin/python")


FOLLOW_SCRIPT = """
import sys
sys.path.insert(0, {examples!r})
import wordcount
from rstreams.runtime.spark import run_spark

inbox, ckpt, out = sys.argv[1:4]
result = run_spark(wordcount.build().build(), {{"sentences": inbox}}, master="local[2]",
                   streaming=True, checkpoint=ckpt, trigger_once=False,
                   outputs={{"word-counts": out}})
print("stopped", sum(result.tables["word-counts"].values()))
"""


def test_an_endless_streaming_run_stops_on_ctrl_c_with_its_tables(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.txt").write_text("one two two\nthree three three\n")
    out = tmp_path / "counts.jsonl"
    script = tmp_path / "follow.py"
    script.write_text(FOLLOW_SCRIPT.format(examples=str(ROOT / "examples")))
    mark = uuid.uuid4().hex
    p = subprocess.Popen(
        [sys.executable, script, inbox, tmp_path / "ckpt", out],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=marked_env(mark),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not out.exists():  # the first micro-batch is committed
            assert p.poll() is None, p.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no micro-batch within 180 s"
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        stdout, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0 and stdout.strip() == "stopped 6", err[-3000:]
    assert_nothing_left(mark)


def test_session_docstring_examples() -> None:
    import doctest

    from rstreams.runtime.spark import session

    assert doctest.testmod(session).failed == 0


def test_a_relative_worker_python_is_refused_locally() -> None:
    from rstreams.errors import ConfigError
    from rstreams.runtime.spark.session import get_session

    with pytest.raises(ConfigError, match="relative: that works on cluster executors"):
        get_session("local[1]", conf={"spark.pyspark.python": "./environment/bin/python"})
