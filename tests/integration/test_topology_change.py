"""A job remembers its topology: `rstreams run` on a real data directory refuses a
changed pipeline that would lose state, shows the diff, and proceeds with
--allow-topology-change or --fresh; a change that loses nothing runs."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

V1 = """
    from rstreams import StreamBuilder

    def build():
        b = StreamBuilder("wc")
        words = b.source("lines").flatMap(str.split)
        words.keyBy(lambda w: w).count({count_args}).sink("counts")
        return b
"""
# A filter inserted upstream of the count: the count moves from depth 3 to depth 4.
V2 = """
    from rstreams import StreamBuilder

    def build():
        b = StreamBuilder("wc")
        words = b.source("lines").flatMap(str.split).filter(lambda w: w != "zzz")
        words.keyBy(lambda w: w).count({count_args}).sink("counts")
        return b
"""
# A new branch after the count: nothing that holds state moves.
V1_PLUS_SINK = """
    from rstreams import StreamBuilder

    def build():
        b = StreamBuilder("wc")
        words = b.source("lines").flatMap(str.split)
        counts = words.keyBy(lambda w: w).count()
        counts.sink("counts")
        counts.toRStream().filter(lambda n: n > 1).sink("repeated")
        return b
"""


def rstreams(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


class Job:
    """One pipeline file that the test edits, one input file it appends to, one data dir."""

    def __init__(self, tmp: Path) -> None:
        self.pipeline = tmp / "pipeline.py"
        self.input = tmp / "lines.txt"
        self.input.write_text("")
        self.data = tmp / "data"
        self.out = tmp / "counts.jsonl"

    def write(self, source: str, count_args: str = "") -> None:
        self.pipeline.write_text(textwrap.dedent(source.format(count_args=count_args)))

    def append(self, text: str) -> None:
        with self.input.open("a") as f:
            f.write(text)

    def run(self, *flags: str) -> subprocess.CompletedProcess[str]:
        return rstreams(
            "run", self.pipeline, "--input", self.input, "--data-dir", self.data,
            "--workers", "1", "--output", self.out, *flags,
        )  # fmt: skip

    @property
    def recorded(self) -> str:
        return (self.data / "wc" / "topology.json").read_text()

    def table(self) -> dict[str, int]:
        rows = [json.loads(line) for line in self.out.read_text().splitlines()]
        return {r["key"]: r["value"] for r in rows}


def counts(text: str) -> dict[str, int]:
    return dict(collections.Counter(text.split()))


def test_a_change_that_loses_state_is_refused_until_allowed(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.write(V1)
    job.append("a b a\n")
    first = job.run()
    assert first.returncode == 0, first.stderr
    recorded = json.loads(job.recorded)
    assert [s["name"] for s in recorded["steps"]][3] == "lines-count-3"

    job.write(V2)
    job.append("b c\n")
    refused = job.run()
    assert refused.returncode == 2, refused.stderr
    err = refused.stderr
    assert err.startswith("rstreams: error: job 'wc' last ran with another topology")
    assert "Topology diff: wc" in err
    assert "LOST  wc-lines-count-3-store -> wc-lines-count-4-store [count]" in err
    assert '.count(name="lines-count-3")' in err
    assert "--fresh" in err and "--allow-topology-change" in err
    assert json.loads(job.recorded) == recorded  # a refused run records nothing

    allowed = job.run("--allow-topology-change")
    assert allowed.returncode == 0, allowed.stderr
    assert "runs with a changed topology" in allowed.stderr  # said loudly, not silently
    assert "lines-count-4" in job.recorded
    # The new count started empty: its store only saw the second line.
    assert job.table() == {"a": 2, "b": 1, "c": 1}
    again = job.run()  # the changed topology is the job's topology now
    assert again.returncode == 0, again.stderr

    job.write(V1)
    assert job.run().returncode == 2  # back to V1 is a change again
    fresh = job.run("--fresh")
    assert fresh.returncode == 0, fresh.stderr
    assert job.table() == counts("a b a b c")  # everything again, from empty state
    assert "lines-count-4" not in job.recorded


def test_pinning_the_old_name_keeps_the_state(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.write(V1)
    job.append("a b a\n")
    assert job.run().returncode == 0
    job.write(V2, count_args='name="lines-count-3"')  # what the refusal's hint says
    job.append("b c a\n")
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert job.table() == counts("a b a b c a")  # counting went on from the old state


def test_a_change_that_loses_nothing_runs_with_an_info_line(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.write(V1)
    job.append("a b a\n")
    assert job.run().returncode == 0
    job.write(V1_PLUS_SINK)
    job.append("b\n")
    r = rstreams(
        "run", job.pipeline, "--input", job.input, "--data-dir", job.data, "--workers", "1",
        "-v",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "the topology changed without losing state" in r.stderr
    assert "added    wc-" not in r.stderr and "added  repeated [sink]" in r.stderr
    assert "repeated" in job.recorded


def test_an_unreadable_record_is_refused_unless_allowed(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.write(V1)
    job.append("a\n")
    assert job.run().returncode == 0
    (job.data / "wc" / "topology.json").write_text("{not json")
    r = job.run()
    assert r.returncode == 2
    assert "topology.json is unreadable" in r.stderr and "--allow-topology-change" in r.stderr
    r = job.run("--allow-topology-change")
    assert r.returncode == 0, r.stderr
    assert json.loads(job.recorded)["job_id"] == "wc"


# -- a change that applies to new input only -----------------------------------------------


def test_a_rerun_without_new_input_says_its_table_is_the_earlier_versions(
    tmp_path: Path,
) -> None:
    job = Job(tmp_path)
    job.write(V1, count_args='name="lines-count-3"')
    job.append("a b a\nzzz\n")
    assert job.run().returncode == 0
    job.write(V2, count_args='name="lines-count-3"')  # a filter before the kept count
    r = job.run()
    assert r.returncode == 0, r.stderr  # nothing is lost: the run goes on
    err = r.stderr
    start = err.index("job 'wc' resumes with a changed pipeline (lines-filter-2 [filter] added)")
    assert "and no new input" in err[start:]
    end = err.index("no new input: ")
    assert start < end < err.index("done: 0 records in")
    ending = err[end:]
    assert "was already consumed by an earlier run" in ending
    assert "the table the earlier version of the pipeline computed" in ending
    assert "topic counts and store wc-lines-count-3-store" in ending
    assert "Run with --fresh to recompute it from all input" in ending
    assert "from the earlier pipeline: counts, wc-lines-count-3-store" in ending
    assert job.table() == counts("a b a zzz")  # the old table, zzz and all

    fresh = job.run("--fresh")
    assert fresh.returncode == 0, fresh.stderr
    assert "earlier version" not in fresh.stderr
    assert job.table() == counts("a b a")  # the filter applied to all input


def test_a_rerun_with_new_input_says_only_that_went_through_the_change(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.write(V1, count_args='name="lines-count-3"')
    job.append("a zzz\n")
    assert job.run().returncode == 0
    job.write(V2, count_args='name="lines-count-3"')
    job.append("zzz a\n")
    r = job.run()
    assert r.returncode == 0, r.stderr
    assert "the change applies to new input only" in r.stderr
    assert "only the 1 new input record(s) went through the changed pipeline" in r.stderr
    assert job.table() == {"a": 2, "zzz": 1}  # the old zzz stays; the new one is filtered
    again = job.run()  # the changed pipeline is the job's now: nothing more to say
    assert again.returncode == 0, again.stderr
    assert "earlier version" not in again.stderr


def test_the_python_api_reports_stale_output_of_a_resumed_job(tmp_path: Path) -> None:
    from rstreams import run
    from rstreams.loader import load_topology

    job = Job(tmp_path)
    job.write(V1, count_args='name="lines-count-3"')
    job.append("a zzz\n")
    options = {"data_dir": str(job.data), "pipeline": str(job.pipeline), "workers": 1}
    first = run(load_topology(str(job.pipeline)), {"lines": str(job.input)}, **options)
    assert first.stale == ()
    job.write(V2, count_args='name="lines-count-3"')
    second = run(load_topology(str(job.pipeline)), {"lines": str(job.input)}, **options)
    assert second.records_in == 0
    assert second.stale == ("counts", "wc-lines-count-3-store")
    assert second.tables["counts"] == {"a": 1, "zzz": 1}
    # The in-memory runtime starts from nothing every time: nothing stale there.
    memory = run(load_topology(str(job.pipeline)), {"lines": str(job.input)})
    assert (memory.stale, memory.tables["counts"]) == ((), {"a": 1})
