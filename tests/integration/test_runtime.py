"""The durable embedded runtime: file log, worker processes, rebalance, resume."""

from __future__ import annotations

import collections
import json
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.supervisor import Supervisor

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "data" / "corpus.txt"

PIPELINE = """
import re
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("wc")
    (b.source("sentences", queues={queues})
       .flatMap(lambda line: re.findall(r"\\w+", line.lower()))
       .keyBy(lambda w: w)
       .count()
       .sink("counts"))
    return b
"""


def counter(*paths: Path) -> dict[str, int]:
    c: collections.Counter[str] = collections.Counter()
    for p in paths:
        with p.open(encoding="utf-8") as f:
            c.update(w for line in f for w in re.findall(r"\w+", line.lower()))
    return dict(c)


def pipeline(tmp_path: Path, queues: int = 1) -> Path:
    p = tmp_path / f"wc{queues}.py"
    p.write_text(textwrap.dedent(PIPELINE.format(queues=queues)))
    return p


def rstreams(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def read_jsonl(path: Path) -> dict:
    return {
        (row := json.loads(line))["key"]: row["value"]
        for line in path.read_text(encoding="utf-8").splitlines()
    }


def big_corpus(tmp_path: Path, copies: int) -> Path:
    text = CORPUS.read_text(encoding="utf-8")
    p = tmp_path / "big.txt"
    p.write_text(text * copies, encoding="utf-8")
    return p


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "queues"), [(1, 1), (2, 8)])
def test_wordcount_on_the_file_log(tmp_path, workers, queues) -> None:
    out = tmp_path / "out.jsonl"
    data = tmp_path / "data"
    r = rstreams(
        "run", pipeline(tmp_path, queues), "--input", CORPUS, "--output", out,
        "--data-dir", data, "--workers", workers,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert read_jsonl(out) == counter(CORPUS)
    assert (data / "wc" / "log").is_dir()
    # The log is inspectable: the group committed every queue up to its end.
    r = rstreams("offsets", "wc", "--data-dir", data)
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.splitlines()[1:]]
    assert rows and all(row[-1] == "0" for row in rows)  # no lag anywhere
    assert {row[0] for row in rows} >= {"sentences", "wc-sentences-count-3-shuffle"}


@pytest.mark.slow
def test_rerun_resumes_and_never_ingests_twice(tmp_path) -> None:
    data = tmp_path / "data"
    p = pipeline(tmp_path, 2)
    src = tmp_path / "in.txt"
    src.write_text("a b\nb\n")
    out = tmp_path / "o.jsonl"
    args = ("run", p, "--input", src, "--output", out, "--data-dir", data, "--workers", 1)
    r = rstreams(*args)
    assert r.returncode == 0, r.stderr
    assert read_jsonl(out) == {"a": 1, "b": 2}
    r = rstreams(*args)
    assert r.returncode == 0, r.stderr
    assert "done: 0 records in" in r.stderr
    assert read_jsonl(out) == {"a": 1, "b": 2}
    with src.open("a") as f:  # the file grew: only the new line is read
        f.write("a c\n")
    r = rstreams(*args)
    assert r.returncode == 0, r.stderr
    assert "done: 1 records in" in r.stderr
    assert read_jsonl(out) == {"a": 2, "b": 2, "c": 1}
    r = rstreams(*args, "--fresh")
    assert r.returncode == 0 and read_jsonl(out) == {"a": 2, "b": 2, "c": 1}
    # The source topic can be read back from an old offset.
    r = rstreams("consume", "sentences", "--data-dir", data, "--from-beginning")
    assert sorted(r.stdout.splitlines()) == ["a b", "a c", "b"]


@pytest.mark.slow
def test_killed_worker_is_replaced_and_no_count_is_lost(tmp_path) -> None:
    corpus = big_corpus(tmp_path, 12)
    p = pipeline(tmp_path, 8)
    topology = load_topology(str(p))
    killed: list[int] = []

    def progress(status) -> None:
        if not killed and status["records_in"] > 20_000 and status["workers"] == 2:
            sup.kill_worker(0, signal.SIGKILL)
            killed.append(status["records_in"])

    sup = Supervisor(
        str(p), topology, {"sentences": str(corpus)}, data_dir=tmp_path / "data",
        workers=2, chunk_lines=2_000, progress=progress,
        worker_args=["--session-timeout", "2", "--commit-interval", "0.2"],
    )  # fmt: skip
    try:
        sup.run()
        table = sup.tables()["counts"]
    finally:
        sup.close()
    assert killed, "the worker was never killed"
    assert sup.spawned == 3  # two workers plus one replacement
    expected = counter(corpus)
    assert table.keys() == expected.keys()
    # At-least-once for now: nothing lost (exactly-once comes with transactional state).
    lost = {w: (table[w], n) for w, n in expected.items() if table[w] < n}
    assert not lost


@pytest.mark.slow
def test_processing_error_stops_the_run_with_the_record(tmp_path) -> None:
    p = tmp_path / "div.py"
    p.write_text(
        textwrap.dedent(
            """
            from rstreams import StreamBuilder
            def build():
                b = StreamBuilder("div")
                b.source("n").map(lambda v: 10 // int(v)).keyBy(lambda v: v).count().sink("o")
                return b
            """
        )
    )
    src = tmp_path / "n.txt"
    src.write_text("1\n0\n2\n")
    r = rstreams("run", p, "--input", src, "--data-dir", tmp_path / "d", "--workers", 2)
    assert r.returncode == 1, r.stderr
    assert "step 'n-map-1'" in r.stderr and "n[0]@1" in r.stderr
    assert "ZeroDivisionError" in r.stderr


@pytest.mark.slow
def test_follow_reads_appended_lines_until_interrupted(tmp_path) -> None:
    import time

    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    out = tmp_path / "o.jsonl"
    p = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "run", str(pipeline(tmp_path, 2)), "--input",
         str(src), "--output", str(out), "--data-dir", str(tmp_path / "d"), "--workers", "1",
         "--follow"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(3)
        with src.open("a") as f:
            f.write("b c\nc")  # the last line is still being written
        time.sleep(1.5)
        with src.open("a") as f:
            f.write(" c\n")
        time.sleep(3)
        assert p.poll() is None, "a followed run must not end by itself"
        # The live group is observable: its member, the tasks it holds, lag per queue.
        r = rstreams("group", "describe", "--data-dir", tmp_path / "d")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("group wc: generation") and "1 live member(s)" in lines[0]
        assert "tasks: 0_0, 0_1, 1_0, 1_1" in lines[1]
        assert any(line.split("\t")[:2] == ["  sentences", "0"] for line in lines)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert read_jsonl(out) == {"a": 1, "b": 2, "c": 3}


def _held_tasks(data: Path, members: int, tasks: int) -> dict[str, list[str]]:
    """The tasks each live member holds, by `rstreams group describe`, once ``members``
    hold ``tasks // members`` tasks each (a rebalance settled: a worker gives tasks up one
    by one as the other takes them), or as they are after 2 minutes."""
    import time

    held: dict[str, list[str]] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.5)
        r = rstreams("group", "describe", "--data-dir", data)
        rows = [line.split("\t") for line in r.stdout.splitlines() if "\ttasks: " in line]
        held = {row[0].strip(): row[-1].removeprefix("tasks: ").split(", ") for row in rows}
        if len(held) == members and all(len(ts) == tasks // members for ts in held.values()):
            break
    return held


@pytest.mark.slow
def test_two_workers_each_hold_tasks_of_every_subtopology(tmp_path) -> None:
    """Each sub-topology's tasks are split over the workers (as RocketMQ allocates per
    topic): with 2 workers and 2 sub-topologies of 8 tasks, each worker holds 4 + 4,
    not one whole sub-topology each (which left the CPU-heavy first stage on one)."""
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    cmd = ["run", pipeline(tmp_path, 8), "--input", src, "--data-dir", tmp_path / "d",
           "--workers", 2, "--follow"]  # fmt: skip
    with subprocess.Popen([sys.executable, "-m", "rstreams", *map(str, cmd)]) as p:
        try:
            held = _held_tasks(tmp_path / "d", members=2, tasks=16)
            p.send_signal(signal.SIGINT)
            assert p.wait(timeout=60) == 0
        finally:
            p.kill()  # (nothing if it has ended)
    assert len(held) == 2 and "none" not in str(held), held
    for member, names in held.items():
        assert sorted(n.split("_")[0] for n in names) == ["0"] * 4 + ["1"] * 4, (member, held)


@pytest.mark.slow
def test_state_inspection_and_bad_state_fails_loudly(tmp_path) -> None:
    from rstreams.state.inspect import list_stores, load_store, load_store_frame

    data = tmp_path / "data"
    p = pipeline(tmp_path, 2)
    src = tmp_path / "in.txt"
    src.write_text("a b\nb\n")
    r = rstreams("run", p, "--input", src, "--data-dir", data, "--workers", 1)
    assert r.returncode == 0, r.stderr
    store = "wc-sentences-count-3-store"
    assert list_stores(data, "wc") == {store: 2}
    assert load_store(data, "wc", store) == {"a": 1, "b": 2}
    frame = load_store_frame(data, "wc", store)
    assert sorted(zip(frame["key"], frame["value"])) == [("a", 1), ("b", 2)]
    r = rstreams("state", "get", store, "b", "--data-dir", data)
    assert r.returncode == 0 and r.stdout.strip() == "2"
    r = rstreams("state", "get", store, "zzz", "--data-dir", data)
    assert r.returncode == 1 and "not found" in r.stderr
    r = rstreams("state", "dump", store, "--data-dir", data)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted((row["key"], row["value"]) for row in rows) == [("a", 1), ("b", 2)]
    # An undecodable value in a changelog: the next run refuses to restore, naming it.
    from rstreams.runtime.queues.filelog import FileBroker

    changelog = "wc-sentences-count-3-changelog"
    with FileBroker(data / "wc" / "log") as b:
        q = next(q for q in range(2) if b.end_offset(changelog, q))
        b.append(changelog, q, [(0, b"\xa1a", b"\xc1", ())])  # 0xc1: never valid msgpack
        bad = b.end_offset(changelog, q) - 1
        b.flush()
    with src.open("a") as f:
        f.write("a\n")
    r = rstreams("run", p, "--input", src, "--data-dir", data, "--workers", 1, "--state", "memory")
    assert r.returncode != 0
    assert f"{changelog}[{q}]@{bad}" in r.stderr and "refusing to restore" in r.stderr


@pytest.mark.slow
def test_workers_do_not_outlive_a_killed_supervisor(tmp_path) -> None:
    import time

    src = tmp_path / "in.txt"
    src.write_text("a\n")
    p = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "run", str(pipeline(tmp_path, 2)), "--input",
         str(src), "--data-dir", str(tmp_path / "d"), "--workers", "2", "--follow"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Wait for both workers to have joined (no fixed sleep: a loaded machine starts
        # them late), then kill the supervisor.
        members = tmp_path / "d" / "wc" / "coordination" / "wc" / "members"
        pids: list[int] = []
        joined_by = time.monotonic() + 120
        while len(pids) < 2 and time.monotonic() < joined_by and p.poll() is None:
            time.sleep(0.2)
            pids = [int(json.loads(f.read_text())["pid"]) for f in members.glob("*.json")]
        assert len(pids) == 2
        p.kill()  # SIGKILL: the supervisor can not clean up
        p.wait()
        deadline = time.monotonic() + 10
        alive = pids
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [pid for pid in pids if _alive(pid)]
        assert not alive, f"orphaned workers: {alive}"
    finally:
        if p.poll() is None:
            p.kill()


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by init) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _offsets(data: Path, job: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, queue) -> (committed, end) of a job, as `rstreams offsets` shows them."""
    r = rstreams("offsets", job, "--data-dir", data)
    rows = [line.split("\t") for line in r.stdout.splitlines()[1:]] if r.returncode == 0 else []
    return {(t, int(q)): (int(c), int(e)) for t, q, c, e, _ in rows}


def _wait_committed(data: Path, job: str, topic: str, records: int, timeout: float = 180) -> None:
    """Until ``records`` of ``topic`` and everything downstream of them are committed."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        offsets = _offsets(data, job)
        ours = [c for (t, _), (c, _) in offsets.items() if t == topic]
        if sum(ours) >= records and all(c == e for c, e in offsets.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"{records} records of {topic} were not processed in {timeout} s")


@pytest.mark.slow
def test_a_followed_join_stopped_and_resumed_keeps_its_joins(tmp_path) -> None:
    """examples/order_payment_join.py, --follow --state memory: the orders are processed
    and the run is stopped; the payments arrive while it is down. The resumed run knows
    the buffered orders only from the join's changelog, and must join every payment made
    within 5 minutes of its order."""
    from rstreams.testing import TopologyTestDriver

    example = ROOT / "examples" / "order_payment_join.py"
    data_files = ROOT / "examples" / "data"
    orders, payments = tmp_path / "orders.jsonl", tmp_path / "payments.jsonl"
    orders.write_text((data_files / "orders.jsonl").read_text())
    payments.write_text("")
    data, out = tmp_path / "d", tmp_path / "o.jsonl"

    def follow(topic: str, records: int) -> str:
        p = subprocess.Popen(
            [sys.executable, "-m", "rstreams", "run", str(example), "--bind", f"orders={orders}",
             "--bind", f"payments={payments}", "--data-dir", str(data), "--state", "memory",
             "--workers", "1", "--follow", "--output", str(out)],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            _wait_committed(data, "order-payment", topic, records)
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
        assert p.returncode == 0, err
        return err

    follow("orders", len(orders.read_text().splitlines()))
    payments.write_text((data_files / "payments.jsonl").read_text())
    follow("payments", len(payments.read_text().splitlines()))

    # The same input, uninterrupted and in event order (the driver keeps one stream
    # time), no end of input. Unpaid orders come out as time passes them, which
    # differs at the end between the two; the matches may not.
    topology = load_topology(str(example))
    records = [
        (json.loads(line)["ts"], topic, line)
        for topic, path in (("orders", orders), ("payments", payments))
        for line in path.read_text().splitlines()
    ]
    with TopologyTestDriver(topology) as driver:
        for _, topic, line in sorted(records):
            driver.pipe(topic, line.encode(), timestamp=0)
        expected = driver.read_table("order-payments")

    def paid(table: dict) -> dict:
        return {k: v for k, v in table.items() if v["paid"] is not None}

    assert len(paid(expected)) > 100
    assert paid(read_jsonl(out)) == paid(expected)
