"""`rstreams run` as a real subprocess under faults: workers SIGKILLed at random while a
word count runs still give the exact table and exit 0; skipped records are reported."""

from __future__ import annotations

import collections
import json
import os
import random
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.chaos import BACKOFF_MAX

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
WORD = re.compile(r"\w+")  # examples/wordcount.py's tokenisation


def rstreams(*args: object, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def read_jsonl(path: Path) -> dict:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {r["key"]: r["value"] for r in rows}


def worker_pids(pid: int) -> list[int]:
    """Live worker processes among the children of ``pid``."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    for tid in tasks:
        try:
            children = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        for child in map(int, children):
            if alive(child) and "rstreams.runtime.engine.coordination.worker" in cmdline(child):
                out.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def make_corpus(path: Path, mb: float) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from corpora import make_zipf
    finally:
        sys.path.remove(str(ROOT / "bench"))
    make_zipf(path, mb)


@pytest.mark.slow
def test_workers_killed_at_random_through_the_cli_give_the_exact_table(tmp_path):
    corpus = tmp_path / "zipf.txt"
    make_corpus(corpus, 50)
    out = tmp_path / "counts.jsonl"
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), "--input", str(corpus),
         "--workers", "2", "--data-dir", str(tmp_path / "data"), "--output", str(out),
         "--max-restarts", "20", "--max-restart-backoff", str(BACKOFF_MAX)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    rng = random.Random(11)
    kills = 0
    seen: set[int] = set()
    try:
        while kills < 20 and proc.poll() is None:
            time.sleep(rng.uniform(0.2, 0.8))
            pids = worker_pids(proc.pid)
            seen.update(pids)
            if pids:
                victim = rng.choice(pids)
                try:
                    os.kill(victim, 9)
                    kills += 1
                except ProcessLookupError:
                    pass
        while proc.poll() is None:
            seen.update(worker_pids(proc.pid))
            time.sleep(0.2)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    elapsed = time.monotonic() - start
    print(f"chaos run: {elapsed:.1f}s, {kills} workers killed, {len(seen)} worker pids")
    assert proc.returncode == 0, err[-3000:]
    assert kills >= 10, f"only {kills} kills in {elapsed:.1f}s: make the input bigger"
    expected = collections.Counter()
    with corpus.open(encoding="utf-8") as f:
        for line in f:
            expected.update(WORD.findall(line.lower()))
    assert read_jsonl(out) == dict(expected)
    time.sleep(0.2)
    assert not [
        p for p in seen if alive(p) and "rstreams.runtime.engine.coordination.worker" in cmdline(p)
    ]


INTS = """
    from rstreams import StreamBuilder

    def build():
        b = StreamBuilder("ints")
        b.source("in").map(int).keyBy(lambda v: v % 3).count().toRStream().sink("out")
        return b
"""


def test_skipped_records_are_reported_by_the_durable_runtime(tmp_path):
    pipeline = tmp_path / "ints.py"
    pipeline.write_text(textwrap.dedent(INTS))
    data = tmp_path / "in.txt"
    lines = [str(i) if i % 97 else f"bad{i}" for i in range(1, 3001)]
    data.write_text("\n".join(lines) + "\n")
    bad = sum(not line.isdigit() for line in lines)
    d = tmp_path / "data"
    base = ["--on-error", "skip", "--data-dir", d]
    r = rstreams("run", pipeline, "--input", data, "--workers", "2", *base)
    assert r.returncode == 0, r.stderr
    done = [line for line in r.stderr.splitlines() if line.startswith("done:")]
    assert done and "3,000 records in, " in done[0] and f", {bad} skipped " in done[0]
    assert f"{bad} record(s) failed and were skipped; the worker logs name each" in r.stderr
    # The in-process runtime says the same.
    mem = rstreams("run", pipeline, "--input", data, "--in-memory", "--on-error", "skip")
    assert f", {bad} skipped " in mem.stderr
    # A resumed run counts what it skipped itself: the input grew by two bad lines.
    with data.open("a") as f:
        f.write("x\n7\ny\n")
    r = rstreams("run", pipeline, "--input", data, "--workers", "1", *base)
    assert r.returncode == 0, r.stderr
    done = [line for line in r.stderr.splitlines() if line.startswith("done:")]
    assert "3 records in, " in done[0] and ", 2 skipped " in done[0], done
    # Nothing skipped: no count, no warning.
    r = rstreams("run", WORDCOUNT, "--input", ROOT / "examples" / "data" / "corpus.txt",
                 "--workers", "1", "--on-error", "skip", "--data-dir", tmp_path / "wc")  # fmt: skip
    assert r.returncode == 0 and "skipped" not in r.stderr, r.stderr


SLOW = """
import time
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("slow")
    b.source("in").map(lambda v: time.sleep(0.0005) or v).sink("out")
    return b
"""


@pytest.mark.parametrize("command", ["produce", "run"])
def test_sigterm_exits_143(tmp_path, command):
    """SIGTERM stops a command like Ctrl-C, with exit code 143 (128 + 15, as shells report
    it; Ctrl-C's is 130: docs/cli.md, Exit codes)."""
    if command == "produce":
        argv = ["produce", "notes", "--job", "scratch", "--data-dir", str(tmp_path / "d")]
    else:
        slow = tmp_path / "slow.py"
        slow.write_text(SLOW)  # still running when stopped
        data = tmp_path / "in.txt"
        data.write_text("x\n" * 40_000)
        argv = ["run", str(slow), "--input", str(data), "--workers", "1",
                "--data-dir", str(tmp_path / "d")]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstreams", *argv],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        if command == "run":
            # Until a worker joined the group (the run is under way, every stop handler
            # set): a fixed 3 s was too short at start on a loaded machine, and long idle.
            members = tmp_path / "d" / "slow" / "coordination" / "slow" / "members"
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                if members.is_dir() and any(members.iterdir()):
                    break
                time.sleep(0.05)
        else:
            time.sleep(3)
        assert proc.poll() is None
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "rstreams: error: interrupted (SIGTERM)" in err
