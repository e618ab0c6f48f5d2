"""The live view (rstreams top): snapshots of a real job directory (file log, group
membership with held task locks, statistics files as workers and the supervisor write
them), rendered to text."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from rstreams.errors import ConfigError
from rstreams.live import (
    LiveSnapshot,
    RunProgress,
    pick_job,
    plain_line,
    progress_text,
    render,
    run_top,
    snapshot,
)
from rstreams.loader import load_topology
from rstreams.planner.describe import tree_data
from rstreams.runtime.engine.coordination.local import create_topics
from rstreams.runtime.engine.coordination.stats import SupervisorStats
from rstreams.runtime.engine.coordination.worker import open_broker
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.rebalance.membership import FileGroupMembership
from rstreams.runtime.results import Progress

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
JOB = "wordcount"
STORE = "wordcount-sentences-count-3-store"
SHUFFLE = "wordcount-sentences-count-3-shuffle"
#: What a supervisor of the word count publishes as its topology tree.
WORDCOUNT_TREE = tree_data(load_topology(str(WORDCOUNT)))


def text_of(renderable: Any, width: int = 120) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(renderable)
    out = console.file.getvalue()
    assert isinstance(out, str)
    return out


def line_with(text: str, start: str) -> str:
    found = [line for line in text.splitlines() if line.lstrip("│├└─ ").startswith(start)]
    assert len(found) == 1, (start, text)
    return found[0]


class Job:
    """The word count's job directory: topics with records and committed offsets, two
    members holding the tasks, and what they publish."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.root = data / JOB
        self.root.mkdir(parents=True)
        self.stats = self.root / "coordination" / JOB / "stats"
        topology = load_topology(str(WORDCOUNT))
        broker = open_broker(self.root)
        try:
            create_topics(topology, broker, EngineConfig(default_queues=8))
            for q in range(8):
                broker.append("sentences", q, [(0, None, b"to be or not", ())] * (100 + q))
                broker.commit(JOB, "sentences", q, 50 + q)
            broker.append(SHUFFLE, 2, [(0, b"be", b"1", ())] * 30)
            broker.commit(JOB, SHUFFLE, 2, 10)
            broker.flush()
        finally:
            broker.close()
        self.members = [FileGroupMembership(self.root, JOB, m) for m in ("w0-1", "w1-2")]
        for m in self.members:
            m.join()
        for q in range(8):  # sub-topology 0 and 1 on queue q: member q % 2
            for sub in (0, 1):
                assert self.members[q % 2].acquire_task(f"{sub}_{q}")
        self.stats.mkdir(parents=True, exist_ok=True)
        self.started = time.time() - 60

    def close(self) -> None:
        for m in self.members:
            m.leave()

    def worker(self, member: str, t: float, k: int, **extra: Any) -> dict[str, Any]:
        """Worker stats after ``k`` seconds of 1,000 (w0-1) or 2,000 (w1-2) lines/s."""
        scale = 1 if member == "w0-1" else 2
        lines = 1000 * scale * k
        doc = {
            "version": 1, "member": member, "pid": os.getpid(), "time": t,
            "started": self.started, "generation": 2, "processed": lines,
            "tasks": {
                f"1_{scale}": {
                    "queues": {}, "restoring": [300 * scale, 1000 * scale], "watermark": None,
                },
                "0_0": {
                    "queues": {"sentences[0]": {"position": 60, "end": 100, "lag": 40}},
                    "restoring": None, "watermark": 5,
                },
            },
            "steps": {
                "sentences-flatMap-1": {"in": lines, "out": 4 * lines},
                "sentences-count-3": {"in": 4 * lines, "out": 3 * lines},
            },
            "stores": {
                f"{STORE}@1_{scale}": {
                    "entries": 1000 * scale, "bytes": 50_000 * scale, "restored": 300 * scale,
                },
            },
            "commits": {
                "count": 40, "seconds_sum": 0.8,
                "buckets": [[0.005, 5], [0.01, 20], [0.025, 35], [0.05, 38], [0.1, 40],
                            ["+Inf", 40]],
            },
            "late": 3 * scale, "skipped": scale, "dead_lettered": scale - 1,
            "restored_records": 300 * scale,
            "errors": [
                {"time": t - 30 + i, "message": f"{member} warning {i}"} for i in range(4)
            ],
        }  # fmt: skip
        doc.update(extra)
        return doc

    def supervisor(self, t: float, k: int, **extra: Any) -> dict[str, Any]:
        doc = {
            "version": 1, "pid": os.getpid(), "time": t, "started": self.started, "job": JOB,
            "pipeline": str(WORDCOUNT), "workers_wanted": 2, "tree": WORDCOUNT_TREE,
            "workers": [
                {"slot": 0, "pid": os.getpid(), "alive": True, "restarts": 0},
                {"slot": 1, "pid": os.getpid(), "alive": True, "restarts": 1},
            ],
            "restarts": 1, "records_in": 3000 * k, "bytes_read": 2_500_000,
            "bytes_total": 10_000_000, "records_out": 500 * k, "lag": 4321,
            "generation": 2, "state": "running",
        }  # fmt: skip
        doc.update(extra)
        return doc

    def publish(self, t: float, k: int, workers: tuple[str, ...] = ("w0-1", "w1-2")) -> None:
        for f in self.stats.glob("worker-*.json"):
            f.unlink()
        for member in workers:
            (self.stats / f"worker-{member}.json").write_text(json.dumps(self.worker(member, t, k)))
        (self.stats / "supervisor.json").write_text(json.dumps(self.supervisor(t, k)))


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    j = Job(tmp_path / "data")
    try:
        yield j
    finally:
        j.close()


@pytest.fixture
def two(job: Job) -> tuple[LiveSnapshot, LiveSnapshot]:
    """Two snapshots of the job two seconds of statistics apart."""
    now = time.time()
    job.publish(now - 2, 1)
    before = snapshot(job.data, JOB)
    job.publish(now, 3)
    return snapshot(job.data, JOB), before


def test_steps_show_in_the_topology_tree_with_their_counts_and_rates(two):
    snap, before = two
    text = text_of(render(snap, before))
    # Both workers: in 1,000*3 + 2,000*3 records, (9,000 - 3,000) over 2 s.
    assert "in 9,000 (3,000/s), out 36,000" in line_with(text, "sentences-flatMap-1 [flatMap]")
    assert "in 36,000 (12,000/s), out 27,000" in line_with(text, "sentences-count-3 [count]")
    # The rest of the tree, from the pipeline the supervisor names.
    assert "sub-topology 0: sentences → " + SHUFFLE in text
    assert "sub-topology 1: " + SHUFFLE + " → word-counts" in text
    assert "sentences-keyBy-2 [keyBy]" in text and "sentences-sink-5 [sink]" in text
    assert text.index("source-sentences") < text.index("sentences-flatMap-1")


def test_without_a_previous_snapshot_there_are_counts_but_no_rates(two):
    snap, _ = two
    text = text_of(render(snap, None))
    assert "in 9,000 (-), out 36,000" in line_with(text, "sentences-flatMap-1")
    assert "records in 9,000 (-), out 1,500 (-), lag 4,321" in text


def test_the_header_shows_job_records_lag_group_and_problems(job, two):
    snap, before = two
    text = text_of(render(snap, before))
    assert text.startswith(f"job {JOB}  running  pipeline {WORDCOUNT}  up 1:0")
    generation = job.members[0].generation()
    assert generation >= 2  # (each join bumped it)
    assert f"generation {generation}, 2 members (w0-1, w1-2), workers 2/2 alive, 1 restarts" in text
    # 3,000 and 500 records a second by the supervisor's counts.
    assert "records in 9,000 (3,000/s), out 1,500 (500/s), lag 4,321" in text
    assert "input 25% of 10.0 MB read" in text
    assert "late 9, skipped 3, dead-lettered 1" in text
    assert "restoring state 30% (900/3,000)" in text  # tasks 1_1 and 1_2, see below


def test_each_queue_shows_its_lag_and_owning_worker(two):
    snap, before = two
    text = text_of(render(snap, before))
    for q in (1, 3, 4):  # the owner from the task locks (w0-1 took the even queues)
        row = line_with(text, f"sentences[{q}]").split()
        assert row == [f"sentences[{q}]", "w1-2" if q % 2 else "w0-1", str(50 + q), "-",
                       str(100 + q), "50"]  # fmt: skip
    # What a worker publishes wins: its position too.
    assert line_with(text, "sentences[0]").split() == [
        "sentences[0]",
        "w1-2",
        "50",
        "60",
        "100",
        "50",
    ]
    assert line_with(text, f"{SHUFFLE}[2]").split() == [
        f"{SHUFFLE}[2]",
        "w0-1",
        "10",
        "-",
        "30",
        "20",
    ]
    # 16 input queues: the 12 that lag most, the rest summed.
    assert "… 4 more queues" in text


def test_workers_show_rates_commit_latency_and_counts(two):
    snap, before = two
    text = text_of(render(snap, before))
    w0 = line_with(text, "w0-1 ").split()
    assert w0[:6] == ["w0-1", str(os.getpid()), "2", "8", "3,000", "1,000/s"]
    assert "20 ms (p99 ≤100 ms)" in line_with(text, "w0-1 ")
    w1 = line_with(text, "w1-2 ").split()
    assert w1[4:6] == ["6,000", "2,000/s"]
    assert w1[-5:-1] == ["6", "2", "1", "600"]  # late, skipped, dead-lettered, restored


def test_state_stores_show_sizes_and_restore_progress(two):
    snap, before = two
    text = text_of(render(snap, before))
    row = line_with(text, STORE)
    # Tasks 1_1 (w0-1) and 1_2 (w1-2): 1,000 + 2,000 entries, 50 + 100 kB, restored
    # 300 + 600 records; both restoring: 300 of 1,000 and 600 of 2,000 offsets.
    assert row.split()[:6] == [STORE, "2", "3,000", "150.0", "kB", "900"]
    assert row.rstrip().endswith("30% (900/3,000)")


def test_the_last_errors_newest_last(two):
    snap, before = two
    text = text_of(render(snap, before))
    shown = text[text.index("errors (newest last):") :].splitlines()[1:]
    assert len(shown) == 5
    assert shown[-1].endswith("w1-2: w1-2 warning 3")
    assert shown[-2].endswith("w0-1: w0-1 warning 3")


def test_without_a_published_tree_steps_are_a_table(job):
    now = time.time()
    job.publish(now - 2, 1)
    sup = job.supervisor(now, 3, tree=None)  # (a run of an earlier rstreams)
    (job.stats / "supervisor.json").write_text(json.dumps(sup))
    before = snapshot(job.data, JOB)
    assert before.topology is None and "--pipeline" in (before.note or "")
    job.publish(now, 3)
    text = text_of(render(snapshot(job.data, JOB, topology=False), before))
    assert "topology of" not in text
    row = line_with(text, "sentences-flatMap-1").split()
    assert row == ["sentences-flatMap-1", "9,000", "3,000/s", "36,000"]


def test_a_worker_that_started_since_counts_from_its_start(job):
    now = time.time()
    job.publish(now - 2, 1, workers=("w0-1",))
    before = snapshot(job.data, JOB)
    late = job.worker("w1-2", before.time + 1.5, 1, started=before.time + 0.5, processed=3000)
    job.publish(now, 3, workers=("w0-1",))
    (job.stats / "worker-w1-2.json").write_text(json.dumps(late))
    text = text_of(render(snapshot(job.data, JOB), before))
    # 3,000 records in the second it ran (it started after the first snapshot).
    assert line_with(text, "w1-2 ").split()[4:6] == ["3,000", "3,000/s"]


def test_dead_processes_files_are_not_shown(job):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    job.publish(time.time(), 1)
    ghost = job.worker("w9-9", time.time(), 1, pid=int(dead.stdout))
    (job.stats / "worker-w9-9.json").write_text(json.dumps(ghost))
    (job.stats / "worker-w8-8.json").write_text('{"version": 1, "member": "w8')  # half
    snap = snapshot(job.data, JOB)
    assert [w["member"] for w in snap.workers] == ["w0-1", "w1-2"]


def test_plain_line(two):
    snap, before = two
    line = plain_line(snap, before)
    assert line == (
        f"{JOB} running: 9,000 records in, 1,500 out (3,000/s in, 500/s out), lag 4,321, "
        f"workers 2/2, generation {snap.generation}, 9 late, 3 skipped, restoring 30% (900/3,000)"
    )
    assert "\n" not in line


def test_before_anything_is_published(job):
    snap = snapshot(job.data, JOB)
    assert snap.supervisor is None and snap.topology is None
    lag = sum(50 for _ in range(8)) + 20
    assert plain_line(snap, None) == (
        f"{JOB}: no statistics yet (is the job running?); lag {lag:,}, generation "
        f"{snap.generation}, 2 members (w0-1, w1-2)"
    )
    text = text_of(render(snap, None))
    assert "no statistics yet" in text and "no topology" in text
    assert line_with(text, "w0-1").split()[:3] == ["w0-1", str(os.getpid()), "8"]


def test_pick_job(tmp_path):
    with pytest.raises(ConfigError, match="no job has run in"):
        pick_job(str(tmp_path), None)
    with pytest.raises(ConfigError, match=r"no job 'b' .* no job has run there: start it with"):
        pick_job(str(tmp_path), "b")
    (tmp_path / "a" / "log").mkdir(parents=True)
    assert pick_job(str(tmp_path), None) == "a"
    with pytest.raises(ConfigError, match=r"no job 'b' .* jobs there: a"):
        pick_job(str(tmp_path), "b")
    (tmp_path / "b" / "log").mkdir(parents=True)
    with pytest.raises(ConfigError, match="several jobs: a, b; name one"):
        pick_job(str(tmp_path), None)


def rstreams(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_top_once_prints_a_plain_line_when_stdout_is_no_terminal(job):
    now = time.time()
    job.publish(now, 2)
    r = rstreams("top", "--data-dir", job.data, "--once", "--refresh", "0.2")
    assert r.returncode == 0, r.stderr
    # (the files did not change in between: no rates)
    assert r.stdout == (
        f"{JOB} running: 6,000 records in, 1,000 out, lag 4,321, workers 2/2, generation "
        f"{job.members[0].generation()}, 9 late, 3 skipped, restoring 30% (900/3,000)\n"
    )


def test_top_exit_codes(tmp_path, job):
    # No such job is a usage error (2), as the admin commands' --job: one line.
    r = rstreams("top", "--data-dir", tmp_path / "nothing", "--once")
    assert r.returncode == 2 and "no job has run in" in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    r = rstreams("top", "nope", "--data-dir", job.data, "--once")
    assert r.returncode == 2 and "no job 'nope'" in r.stderr and "jobs there: wordcount" in r.stderr
    r = rstreams("top", "nope", "--data-dir", tmp_path / "nothing", "--once")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "no job has run there: start it with `rstreams run`" in r.stderr
    (job.data / "other" / "log").mkdir(parents=True)
    r = rstreams("top", "--data-dir", job.data, "--once")
    assert r.returncode == 2 and "several jobs: other, wordcount" in r.stderr
    r = rstreams("top", JOB, "--data-dir", job.data, "--refresh", "0")
    assert r.returncode == 2 and "--refresh must be > 0" in r.stderr
    r = rstreams("top", "--help")
    assert r.returncode == 0 and "example:" in r.stdout and "rstreams top wordcount" in r.stdout


def test_run_top_once_on_a_terminal_draws_the_dashboard(job):
    job.publish(time.time(), 2)
    console = Console(file=io.StringIO(), width=120, force_terminal=True, color_system=None)
    assert run_top(str(job.data), None, refresh=0.1, once=True, console=console) == 0
    text = console.file.getvalue()
    assert "topology of wordcount" in text and "sentences[3]" in text and "w1-2" in text


# -- the width of the terminal ----------------------------------------------------------


@pytest.fixture
def busy(job: Job) -> tuple[LiveSnapshot, LiveSnapshot]:
    """Two snapshots of the job two seconds apart, an hour into its run: records in the
    millions, so cells as wide as a long run makes them."""
    now = time.time()
    job.publish(now - 2, 3600)
    before = snapshot(job.data, JOB)
    job.publish(now, 3602)
    return snapshot(job.data, JOB), before


def headers_of(text: str) -> list[str]:
    """The header of each table drawn: the line above its rule."""
    lines = text.splitlines()
    return [lines[i - 1] for i, line in enumerate(lines) if i and set(line.strip()) == {"─"}]


def widest(text: str) -> int:
    return max(cell_len(line.rstrip()) for line in text.splitlines())


@pytest.mark.parametrize("width", [60, 80, 100, 120])
def test_every_table_fits_the_terminal_with_whole_headers(busy, width):
    """Before: the tables were as wide as their cells, and on a terminal of 80 columns
    rich cut every column of the workers' table to fit, headers too (``wor… pid …
    tas…``). Now the columns least needed go first, names are shortened in the middle
    only when that is not enough, and headers are never cut."""
    snap, before = busy
    text = text_of(render(snap, before), width)
    assert widest(text) <= width, text
    workers, queues, stores = headers_of(text)
    for header in (workers, queues, stores):
        assert "…" not in header, text
    # What matters most is always there, whole.
    assert workers.split()[:1] == ["worker"] and {"records", "rate"} <= set(workers.split())
    assert {"queue", "owner", "committed", "lag"} <= set(queues.split())
    assert {"store", "size", "restoring"} <= set(stores.split())
    w0 = line_with(text, "w0-1 ").split()
    assert "3,602,000" in w0 and "1,000/s" in w0
    assert "shuffle[2]" in text  # (a shortened name keeps its queue)
    if width >= 80:  # no name shortened
        assert f"{SHUFFLE}[2]" in text and STORE in text and "20 ms (p99 ≤100 ms)" in text
    if width >= 100:  # every column
        assert workers.split() == [
            "worker", "pid", "gen", "tasks", "records", "rate", "commit", "avg", "late",
            "skip", "dead", "restored", "seen",
        ]  # fmt: skip
        assert queues.split() == ["queue", "owner", "committed", "position", "end", "lag"]
        assert text.count("workers (records processed, late, skipped, dead-lettered, ") == 1


@contextlib.contextmanager
def busy_supervisor(job: Job, late: float) -> Iterator[None]:
    """The job's supervisor publishing its statistics (with the publisher of ``rstreams
    run``) as a busy one does: now, then not for ``late`` seconds, then every second;
    records in at 3,000 a second, out at 500."""
    coord = job.root / "coordination" / JOB
    sup = SupervisorStats(
        coord, job=JOB, pipeline=str(WORDCOUNT), workers_wanted=2, tree=WORDCOUNT_TREE
    )
    pids: dict[int, int | None] = {0: os.getpid(), 1: os.getpid()}
    start = time.time()

    def status() -> dict[str, int]:
        elapsed = time.time() - start
        return {
            "records_in": 100_000 + round(3000 * elapsed),
            "records_out": 20_000 + round(500 * elapsed),
            "bytes_read": 2_500_000, "bytes_total": 10_000_000, "lag": 4321,
        }  # fmt: skip

    job.publish(start, 3600)  # (the workers' files; the supervisor's is replaced now)
    sup.publish(status(), pids)
    stop = threading.Event()

    def publish() -> None:
        wait = late
        while not stop.wait(wait):
            sup.publish(status(), pids)
            wait = 1.0

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_top_once_measures_rates_over_what_the_supervisor_publishes(job, capsys):
    """Before: ``--once`` slept two seconds and took what had been published by then; a
    supervisor that had not published again (busy: it publishes between turns of its
    loop) left no rates, however much the output grew meanwhile. Now it waits for
    statistics published two seconds after the first it read."""
    with busy_supervisor(job, late=2.8):
        console = Console(file=io.StringIO())  # (not a terminal: one line on stdout)
        assert run_top(str(job.data), None, refresh=0.2, once=True, console=console) == 0
    line = capsys.readouterr().out
    rates = re.search(r"\(([\d,]+)/s in, ([\d,]+)/s out\)", line)
    assert rates, line
    assert 2700 <= int(rates[1].replace(",", "")) <= 3300, line
    assert 450 <= int(rates[2].replace(",", "")) <= 550, line


def test_top_once_on_a_terminal_of_80_columns(job, monkeypatch):
    """``rstreams top --once`` in a terminal of the usual width (rich takes it from
    COLUMNS): every line fits, no header is cut, and the output's rate is measured."""
    monkeypatch.setenv("COLUMNS", "80")
    console = Console(file=io.StringIO(), force_terminal=True, color_system=None)
    assert console.width == 80
    with busy_supervisor(job, late=2.8):
        assert run_top(str(job.data), None, refresh=0.2, once=True, console=console) == 0
    text = console.file.getvalue()
    assert widest(text) <= 80, text
    headers = headers_of(text)
    assert len(headers) == 3 and not any("…" in header for header in headers), text
    assert "worker" in headers[0] and "records" in headers[0] and "rate" in headers[0]
    rate_out = re.search(r"out [\d,]+\s+\(([\d,]+)/s\)", text)
    assert rate_out and 450 <= int(rate_out[1].replace(",", "")) <= 550, text


def test_run_progress_on_a_terminal_is_a_bar_and_is_cleared():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True, color_system=None)
    progress = RunProgress(enabled=True, console=console)
    progress(Progress(1500, 20, 2_500_000, 10_000_000, 2.0, lag=7, workers=2))
    progress(Progress(3000, 40, 5_000_000, 10_000_000, 3.0, lag=9, workers=2))
    progress.done()
    text = out.getvalue()
    assert "5.0/10.0 MB" in text
    assert "3,000 records in, 40 out, lag 9, 1,000 records/s, 2 workers  0:03" in text
    assert "━" in text  # the bar


def test_run_progress_elsewhere_prints_a_line_now_and_then_and_nothing_with_q():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False)
    progress = RunProgress(enabled=True, every=0.0, console=console)
    progress(Progress(1500, 20, 2_500_000, 10_000_000, 2.0, lag=7, restoring=(3, 10)))
    progress.done()
    assert out.getvalue() == (
        "  1,500 records in, 20 out, lag 7, 750 records/s, restoring state 30% (3/10), "
        "25% of input (2s)\n"
    )
    slow = RunProgress(enabled=True, every=3600.0, console=console)
    slow(Progress(1, 1, 1, 2, 1.0))
    quiet = RunProgress(enabled=False, every=0.0, console=console)
    quiet(Progress(1, 1, 1, 2, 1.0))
    assert out.getvalue().count("\n") == 1
    assert progress_text(Progress(0, 0, 0, None, 1.0, detail="stage 3 (count): 1/8 tasks")) == (
        "stage 3 (count): 1/8 tasks"
    )


def test_commits_slower_than_the_last_bucket(job):
    slow = {"count": 2, "seconds_sum": 30.0, "buckets": [[5.0, 0], [10.0, 1], ["+Inf", 2]]}
    now = time.time()
    job.publish(now, 1)
    doc = job.worker("w0-1", now, 1, commits=slow)
    (job.stats / "worker-w0-1.json").write_text(json.dumps(doc))
    text = text_of(render(snapshot(job.data, JOB, topology=False), None))
    assert "15,000 ms (p99 >10,000 ms)" in line_with(text, "w0-1 ")


# -- the live view never runs code named in the data directory ---------------------------

#: A "pipeline" that leaves a marker file when imported (and builds nothing useful).
_TRAP = """
import pathlib
pathlib.Path(__file__).with_name("MARKER").write_text("ran")
from rstreams import StreamBuilder
def build():
    b = StreamBuilder("wordcount")
    b.source("sentences").sink("word-counts")
    return b
"""


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_top_never_imports_the_pipeline_the_statistics_name(
    job: Any, tmp_path: Path, where: str
) -> None:
    """Before: a "pipeline" path in supervisor.json was imported and run by whoever ran
    `rstreams top`, a relative one first from top's working directory."""
    trap_dir = tmp_path / "elsewhere"
    trap_dir.mkdir()
    (trap_dir / "trap.py").write_text(_TRAP)
    now = time.time()
    job.publish(now - 2, 1)
    path = str(trap_dir / "trap.py") if where == "absolute" else "trap.py"
    sup = job.supervisor(now, 3, pipeline=path, tree=None)
    (job.stats / "supervisor.json").write_text(json.dumps(sup))
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "top", "--once", "--data-dir", str(job.data)],
        capture_output=True, text=True, cwd=trap_dir, timeout=120,
    )  # fmt: skip
    assert not (trap_dir / "MARKER").exists(), "top ran code the data directory named"
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{JOB} running: 9,000 records in"), r.stdout  # still shown
    snap = snapshot(job.data, JOB)
    assert snap.topology is None and "--pipeline" in (snap.note or "")
    assert not (trap_dir / "MARKER").exists()


def test_a_tree_that_is_not_a_tree_is_ignored(job: Any) -> None:
    now = time.time()
    job.publish(now - 2, 1)
    for junk in ("import os", [{"id": "x"}], [{"id": 0, "roots": [5], "sources": [], "sinks": []}]):
        (job.stats / "supervisor.json").write_text(json.dumps(job.supervisor(now, 3, tree=junk)))
        snap = snapshot(job.data, JOB)
        assert snap.topology is None and "--pipeline" in (snap.note or "")


def test_top_draws_the_tree_of_a_pipeline_named_on_the_command_line(job: Any) -> None:
    now = time.time()
    job.publish(now - 2, 1)
    (job.stats / "supervisor.json").write_text(json.dumps(job.supervisor(now, 3, tree=None)))
    console = Console(file=io.StringIO(), width=120, force_terminal=True, color_system=None)
    code = run_top(
        str(job.data), None, refresh=0.1, once=True, console=console, pipeline=str(WORDCOUNT)
    )
    assert code == 0
    assert "topology of wordcount" in console.file.getvalue()
    with pytest.raises(ConfigError, match="is job 'pick', not 'wordcount'"):
        other = Path(job.data) / "pick.py"
        other.write_text(
            _TRAP.replace('"wordcount"', '"pick"').replace("pathlib.Path", "0 and pathlib.Path")
        )
        run_top(str(job.data), None, refresh=0.1, once=True, console=console, pipeline=str(other))
