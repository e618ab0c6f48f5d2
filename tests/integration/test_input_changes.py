"""An input is known by its content: a resumed job reads on only from a file that still
holds what the job read of it, and a record is a whole line.

Each case runs the word count (examples/wordcount.py) on the durable runtime with one
worker: real file log, real worker processes. Bounded runs go through the command line
(exit code and message); followed runs run in process, driven by the run's own progress
reports rather than by a clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rstreams.errors import ConfigError

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = str(ROOT / "examples" / "wordcount.py")
CHANGED = "changed since the job read it: "


def _counts(text: str) -> dict[str, int]:
    return dict(Counter(text.lower().split()))


class Job:
    def __init__(self, tmp: Path) -> None:
        self.input = tmp / "in.txt"
        self.output = tmp / "out.jsonl"
        self.data = tmp / "data"

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        self.output.unlink(missing_ok=True)
        return subprocess.run(
            [sys.executable, "-m", "rstreams", "run", PIPELINE, "--input", str(self.input),
             "--output", str(self.output), "--data-dir", str(self.data), "--workers", "1",
             *extra],
            capture_output=True, text=True, timeout=240, cwd=ROOT,
        )  # fmt: skip

    def table(self) -> dict[str, int]:
        rows = [json.loads(line) for line in self.output.read_text().splitlines()]
        return {r["key"]: r["value"] for r in rows}

    def refused(self, what: str) -> None:
        """A run refused before any work, exit 2, naming the file and what changed; then
        --fresh gives the table of the file as it is."""
        r = self.run()
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(f"rstreams: error: input {str(self.input)!r} {CHANGED}")
        assert what in r.stderr and r.stderr.rstrip().endswith("run with --fresh to start over")
        assert not self.output.exists()
        r = self.run("--fresh")
        assert r.returncode == 0, r.stderr
        assert self.table() == _counts(self.input.read_text())


@pytest.fixture
def job(tmp_path: Path) -> Job:
    return Job(tmp_path)


FIRST = "alpha beta\nhello world\n"


@pytest.mark.parametrize(
    ("new", "what"),
    [
        pytest.param("gamma delt\nhello there\n", "differ from what the job read", id="same size"),
        pytest.param("alpha\n", "shorter than the 23 bytes the job read", id="smaller"),
        pytest.param("omega beta\nhello world\nnew words\n", "differ from what", id="larger"),
    ],
)
def test_an_input_rewritten_between_runs_is_refused(job: Job, new: str, what: str) -> None:
    assert len(FIRST) == 23 and len("gamma delt\nhello there\n") == 23
    job.input.write_text(FIRST)
    assert job.run().returncode == 0
    job.input.write_text(new)
    job.refused(what)


def test_an_input_replaced_by_another_file_is_refused(job: Job) -> None:
    """Another file (a new inode) at the same path, rewritten at the start."""
    job.input.write_text(FIRST)
    assert job.run().returncode == 0
    other = job.input.with_name("other.txt")
    other.write_text("alpha beta\nhello earth\nmore\n")
    os.replace(other, job.input)
    job.refused("its first 23 bytes differ")


def test_an_input_that_only_grew_goes_on(job: Job) -> None:
    """Appended to, then replaced by a longer copy (a new inode, same beginning): each run
    reads just the new lines; the table is the whole file's."""
    job.input.write_text(FIRST)
    assert job.run().returncode == 0
    with job.input.open("a") as f:
        f.write("hello again\n")
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert "1 records in" in r.stderr
    other = job.input.with_name("other.txt")
    other.write_text(job.input.read_text() + "and more\n")
    os.replace(other, job.input)
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert "1 records in" in r.stderr
    assert job.table() == _counts(job.input.read_text())


def test_a_last_line_read_without_newline_that_goes_on_is_refused(job: Job) -> None:
    """A bounded run reads a last line without a newline as a line (the file may still be
    being written); a later run that finds the line extended refuses."""
    job.input.write_bytes(b"alpha beta\nhello wor")
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert job.table() == {"alpha": 1, "beta": 1, "hello": 1, "wor": 1}
    with job.input.open("ab") as f:
        f.write(b"ld\n")
    job.refused("its last line, which the job read without a newline at byte 20, goes on now")
    assert "world" in job.table() and "wor" not in job.table()


def test_a_last_line_read_without_newline_that_gets_its_newline_goes_on(job: Job) -> None:
    """Only its newline came (and more lines after it): the line read was whole; the
    next run reads the new lines, with no empty line for that newline."""
    job.input.write_bytes(b"alpha beta\nhello wor")
    assert job.run().returncode == 0
    with job.input.open("ab") as f:
        f.write(b"\nmore\n")
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert "1 records in" in r.stderr
    assert job.table() == {"alpha": 1, "beta": 1, "hello": 1, "wor": 1, "more": 1}


def _follow(job: Job, on_progress: Any) -> Any:
    """Follow ``job.input`` in process; ``on_progress(progress)`` sees each report."""
    from rstreams import run
    from rstreams.loader import load_topology

    return run(
        load_topology(PIPELINE),
        {"sentences": str(job.input)},
        data_dir=str(job.data),
        pipeline=PIPELINE,
        workers=1,
        follow=True,
        progress=on_progress,
    )


#: Progress reports (one each 0.1 s of the run's loop, which looks at a followed file
#: each 0.5 s) after which a run that did not notice a change is stopped, so that the test
#: fails rather than hangs; a run that notices stops long before.
UNNOTICED = 100


@pytest.mark.parametrize(
    ("change", "what"),
    [
        pytest.param("truncate", "shorter than the 23 bytes the job read", id="truncated"),
        pytest.param("truncate+append", "differ from what the job read", id="truncated+appended"),
        pytest.param("replace", "another file was put at its path", id="replaced"),
    ],
)
def test_follow_stops_on_an_input_truncated_or_replaced(job: Job, change: str, what: str) -> None:
    """As ``tail -F`` notices: the followed run stops with the error instead of reading
    on (lines past the old length, the first of them a fragment) or waiting for ever."""
    job.input.write_text(FIRST)
    first = len(FIRST)
    changed_at: list[int] = []

    def on_progress(p: Any) -> None:
        if not changed_at and p.bytes_read == first and p.records_out >= 4:
            changed_at.append(0)
            if change == "replace":
                other = job.input.with_name("other.txt")
                other.write_text(FIRST + "more words\n")
                os.replace(other, job.input)
            else:
                job.input.write_text("")
                if change == "truncate+append":
                    job.input.write_text("gamma\ndelta words\nmore words\n")
        elif changed_at:
            changed_at[0] += 1
            if changed_at[0] > UNNOTICED or p.bytes_read > first:
                raise KeyboardInterrupt

    with pytest.raises(ConfigError, match=f"{CHANGED}.*{what}.*--fresh"):
        _follow(job, on_progress)
    assert changed_at and changed_at[0] <= UNNOTICED


def test_follow_never_ingests_half_a_line(job: Job) -> None:
    """A followed file's last line is read once its newline is there, whole."""
    job.input.write_bytes(b"alpha beta\nhello wor")
    seen_partial: list[bool] = []

    def on_progress(p: Any) -> None:
        if not seen_partial and p.records_out >= 2:
            assert p.bytes_read == len(b"alpha beta\n")  # "hello wor" waits for its newline
            seen_partial.append(True)
            with job.input.open("ab") as f:
                f.write(b"ld\n")
        elif seen_partial and p.bytes_read == job.input.stat().st_size and p.records_out >= 4:
            raise KeyboardInterrupt

    result = _follow(job, on_progress)
    assert result.tables["word-counts"] == {"alpha": 1, "beta": 1, "hello": 1, "world": 1}
