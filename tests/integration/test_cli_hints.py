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
