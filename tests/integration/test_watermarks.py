"""Watermarks: results do not depend on how the input was split into queues.

Generated in-order inputs, results worked out by hand: a tumbling close-mode count with
grace 0 over a timed text, and two files joined within 5 s. The test driver, an
in-memory run (one queue per source topic: one producer per shuffle side) and durable
runs with 8 queues per topic (several producers per shuffle: records of different
queues interleave after it) all give exactly that table. Before watermarks, the durable
count lost half its windows to lateness and the join most of its matches (one file is
ingested before the other). And on the durable log: watermarks are carried in the
exactly-once transactions, and after a restart time is never behind what was judged.
"""

from __future__ import annotations

import collections
import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rstreams import StreamBuilder, TumblingWindow
from rstreams.loader import load_topology
from rstreams.planner.topology import Topology
from rstreams.runtime.engine.coordination.local import LocalEngine
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from rstreams.runtime.engine.coordination.worker import open_broker
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.operators.watermarks import decode_control
from rstreams.runtime.engine.tasks.task import TXN_HEADER
from rstreams.runtime.results import row_json
from rstreams.serde import get_serde
from rstreams.testing import TopologyTestDriver
from rstreams.windowed import result_row
from tests.helpers.chaos import BACKOFF_MAX, RandomKills

COUNT = """
from rstreams import StreamBuilder, TumblingWindow


def build():
    b = StreamBuilder("timed")
    (
        b.source("lines")
        .selectTimestamp(lambda line: int(line.split()[0]))
        .keyBy(lambda line: line.split()[1])
        .window(TumblingWindow(60_000, grace=0), emit="close")
        .count(name="count", queues=8)
        .toRStream()
        .sink("counts")
    )
    return b
"""

JOIN = """
import json

from rstreams import JoinWindow, StreamBuilder


def build():
    b = StreamBuilder("pay")
    orders = b.source("orders").map(json.loads).selectTimestamp(lambda o: o["t"])
    payments = b.source("payments").map(json.loads).selectTimestamp(lambda p: p["t"])
    (
        orders.join(payments)
        .where(lambda o: o["id"])
        .equalTo(lambda p: p["order"])
        .window(JoinWindow(before=5000, after=5000))
        .apply(lambda o, p: f"{o['id']}:{p['id']}", name="match", queues=8)
        .sink("matches")
    )
    return b
"""

WORDS = ["ant", "bee", "cat", "dog", "eel"]


def timed_text(path: Path, lines: int) -> dict[str, int]:
    """A line every 40 ms; the table of the count: window key (as written) -> count."""
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    with path.open("w") as f:
        for i in range(lines):
            t, w = i * 40, WORDS[(i * 7 + i // 3) % 5]
            f.write(f"{t} {w}\n")
            counts[(w, t // 60_000 * 60_000)] += 1
    last = (lines - 1) * 40
    return {
        json.dumps(
            {
                "key": w,
                "window": {"start": s, "end": s + 60_000},
                # Windows the input's last timestamp reached close on time; the last
                # one at the end of input.
                "closed": "event-time" if s + 60_000 <= last else "end-of-input",
            }
        ): n
        for (w, s), n in counts.items()
    }


def orders_and_payments(tmp: Path, n: int) -> tuple[Path, Path, dict[str, str]]:
    """An order every 100 ms; payments for two orders in three, -9 s to +9 s off it, in
    time order. The table of the join: order id -> "order:payment" within 5 s."""
    rnd = random.Random(7)
    pays = []
    orders, payments = tmp / "orders.jsonl", tmp / "payments.jsonl"
    with orders.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "t": i * 100}) + "\n")
            if i % 3:
                pays.append((max(0, i * 100 + rnd.randint(-9000, 9000)), i))
    pays.sort()
    expected = {}
    with payments.open("w") as f:
        for k, (t, i) in enumerate(pays):
            f.write(json.dumps({"id": f"p{k}", "order": i, "t": t}) + "\n")
            if abs(t - i * 100) <= 5000:
                expected[str(i)] = f"{i}:p{k}"
    return orders, payments, expected


def rstreams_run(pipeline: Path, *args: object) -> dict[str, object]:
    out = pipeline.parent / f"out-{abs(hash(args))}.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", pipeline, *map(str, args), "--output", out],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return read_table(out)


def table_of(rows: list[dict[str, object]]) -> dict[str, object]:
    """Rows as `--output` writes them, keyed as timed_text keys its table: a windowed
    result by the row without its value."""
    return {
        json.dumps({k: v for k, v in r.items() if k != "value"})
        if "window" in r
        else str(r["key"]): r["value"]
        for r in rows
    }


def read_table(path: Path) -> dict[str, object]:
    return table_of([json.loads(line) for line in path.read_text().splitlines()])


def write(tmp: Path, name: str, source: str) -> Path:
    path = tmp / name
    path.write_text(textwrap.dedent(source))
    return path


def test_the_driver_gives_the_count_and_the_join_as_worked_out(tmp_path) -> None:
    expected = timed_text(tmp_path / "lines.txt", 6000)
    with TopologyTestDriver(load_topology(str(write(tmp_path, "c.py", COUNT)))) as d:
        for line in (tmp_path / "lines.txt").read_text().splitlines():
            d.pipe("lines", line)
        d.end_of_input()
        got = {json.dumps(r.key.to_dict()): r.value for r in d.read("counts")}
    assert got == expected

    orders, payments, matches = orders_and_payments(tmp_path, 3000)
    records = [(json.loads(x)["t"], "orders", x) for x in orders.read_text().splitlines()]
    records += [(json.loads(x)["t"], "payments", x) for x in payments.read_text().splitlines()]
    with TopologyTestDriver(load_topology(str(write(tmp_path, "j.py", JOIN)))) as d:
        # One partition's order is the time order of the two files together.
        for _, topic, line in sorted(records, key=lambda r: (r[0], r[1])):
            d.pipe(topic, line)
        got = {str(r.key): r.value for r in d.read("matches")}
    assert got == matches


def test_an_in_memory_run_gives_the_count_and_the_join_as_worked_out(tmp_path) -> None:
    expected = timed_text(tmp_path / "lines.txt", 6000)
    pipeline = write(tmp_path, "c.py", COUNT)
    assert rstreams_run(pipeline, "--in-memory", "--input", tmp_path / "lines.txt") == expected
    orders, payments, matches = orders_and_payments(tmp_path, 3000)
    binds = ["--bind", f"orders={orders}", "--bind", f"payments={payments}"]
    assert rstreams_run(write(tmp_path, "j.py", JOIN), "--in-memory", *binds) == matches


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_durable_runs_with_8_queues_give_the_count_and_the_join_as_worked_out(
    tmp_path, workers
) -> None:
    # More lines than an ingest chunk (20,000): the input spreads over the 8 queues.
    expected = timed_text(tmp_path / "lines.txt", 50_000)
    pipeline = write(tmp_path, "c.py", COUNT)
    data = ["--workers", workers, "--data-dir", tmp_path / "data"]
    if workers == 2:  # a long idle timeout changes nothing on a bounded run
        data += ["--idle-timeout", "60"]
    got = rstreams_run(pipeline, "--input", tmp_path / "lines.txt", *data)
    assert got == expected
    orders, payments, matches = orders_and_payments(tmp_path, 30_000)
    binds = ["--bind", f"orders={orders}", "--bind", f"payments={payments}"]
    assert rstreams_run(write(tmp_path, "j.py", JOIN), *binds, *data) == matches


def without_close_labels(table: dict[str, object]) -> dict[str, object]:
    """Window keys without ``closed``: Spark batch has no stream time to close by."""
    out = {}
    for key, value in table.items():
        window = json.loads(key)
        window.pop("closed", None)
        out[json.dumps(window)] = value
    return out


# COUNT's and JOIN's steps in one pipeline, their results merged into one sink: one
# Spark run (one JVM) gives both tables, told apart by their keys (a window, an order id).
COUNT_AND_JOIN = """
import json

from rstreams import JoinWindow, StreamBuilder, TumblingWindow


def build():
    b = StreamBuilder("timed-pay")
    counts = (
        b.source("lines")
        .selectTimestamp(lambda line: int(line.split()[0]))
        .keyBy(lambda line: line.split()[1])
        .window(TumblingWindow(60_000, grace=0), emit="close")
        .count(name="count", queues=8)
        .toRStream()
    )
    orders = b.source("orders").map(json.loads).selectTimestamp(lambda o: o["t"])
    payments = b.source("payments").map(json.loads).selectTimestamp(lambda p: p["t"])
    matches = (
        orders.join(payments)
        .where(lambda o: o["id"])
        .equalTo(lambda p: p["order"])
        .window(JoinWindow(before=5000, after=5000))
        .apply(lambda o, p: f"{o['id']}:{p['id']}", name="match", queues=8)
    )
    counts.merge(matches).sink("results")
    return b
"""


@pytest.mark.slow
def test_spark_batch_gives_the_count_and_the_join_as_worked_out(tmp_path) -> None:
    pytest.importorskip("pyspark", reason="the Spark backend needs rstreams[spark]")
    expected = timed_text(tmp_path / "lines.txt", 6000)
    orders, payments, matches = orders_and_payments(tmp_path, 3000)
    binds = [f"lines={tmp_path / 'lines.txt'}", f"orders={orders}", f"payments={payments}"]
    got = rstreams_run(
        write(tmp_path, "cj.py", COUNT_AND_JOIN),
        *(arg for bind in binds for arg in ("--bind", bind)),
        *("--backend", "spark", "--master", "local[2]"),
    )
    windows = {k: v for k, v in got.items() if k.startswith("{")}
    assert without_close_labels(windows) == without_close_labels(expected)
    assert {k: v for k, v in got.items() if not k.startswith("{")} == matches


def window_count() -> Topology:
    b = StreamBuilder("wmd")
    counts = (
        b.source("in", queues=2)
        .selectTimestamp(lambda v: int(v.split()[1]))
        .keyBy(lambda v: v.split()[0])
        .window(TumblingWindow(100, grace=0), emit="close")
        .count(name="agg", queues=3)
    )
    counts.toRStream().sink("out")
    counts.late().sink("late")
    return b.build()


def feed(engine: LocalEngine, queue: int, *records: tuple[str, int]) -> None:
    rows = [(0, None, f"{k} {ts}".encode(), ()) for k, ts in records]
    engine.broker.append("in", queue, rows)
    engine.run_until_idle()


def test_watermarks_are_committed_with_the_data_and_survive_a_restart(tmp_path) -> None:
    config = EngineConfig(guarantee="exactly-once", state="rocksdb", state_dir=str(tmp_path / "s"))
    broker = open_broker(tmp_path)
    engine = LocalEngine(window_count(), broker, config)
    feed(engine, 0, ("a", 10), ("a", 20), ("b", 230))
    feed(engine, 1, ("a", 30), ("c", 140))
    shuffle = "wmd-agg-shuffle"
    for q in range(3):
        records = broker.read(shuffle, q, 0, 1000)
        controls = [decode_control(r.value) for r in records if r.key is None]
        assert controls[-1] == ((0, 1), 140, False, 140, None)
        # Written by the tasks' transactions (every frame's first record is marked).
        assert any(h[0] == TXN_HEADER for h in records[0].headers)
    assert sorted(t.ctx.watermark for t in engine.tasks if t.sub.id == 1) == [140] * 3
    assert [r.value for r in broker.read("out", 0, 0, 100)] == [b"3"]  # a in [0, 100)
    engine.close()
    broker.close()

    # A restart: the consumers lost the producers' watermarks (read before their last
    # commit), but their stream time is restored, so [0, 100) does not open again.
    broker = open_broker(tmp_path)
    engine = LocalEngine(window_count(), broker, config)
    assert sorted(t.ctx.watermark for t in engine.tasks if t.sub.id == 1) == [-(2**62)] * 3
    feed(engine, 0, ("a", 50))
    assert [r.value for r in broker.read("late", 0, 0, 100)] == [b'"a 50"']
    feed(engine, 0, ("a", 260))
    feed(engine, 1, ("c", 250))
    engine.end_of_input()
    out = [(r.key, r.value) for r in broker.read("out", 0, 0, 100)]
    engine.close()
    broker.close()
    assert sorted(out) == sorted(
        [
            (b'{"@windowed":["a",0,100],"closed":"event-time"}', b"3"),
            (b'{"@windowed":["c",100,200],"closed":"event-time"}', b"1"),
            (b'{"@windowed":["b",200,300],"closed":"end-of-input"}', b"1"),
            (b'{"@windowed":["c",200,300],"closed":"end-of-input"}', b"1"),
            (b'{"@windowed":["a",200,300],"closed":"end-of-input"}', b"1"),
        ]
    )


def test_idle_timeout_is_an_option_of_the_durable_runtime(tmp_path) -> None:
    (tmp_path / "lines.txt").write_text("0 a\n")
    pipeline = write(tmp_path, "c.py", COUNT)
    args = ["--in-memory", pipeline, "--input", tmp_path / "lines.txt", "--idle-timeout", "5"]
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "--idle-timeout" in r.stderr


def run_with_chaos(
    pipeline: Path, inputs: dict[str, str], sink: str, data: Path
) -> list[tuple[bytes, bytes]]:
    """A durable run with two workers SIGKILLed at random (and crashing at commit and
    restore: RSTREAMS_FAULTS): every record the sink topic holds."""
    records = sum(len(Path(p).read_text().splitlines()) for p in inputs.values())
    chaos = RandomKills(seed=5, limit=10, records=records, gap=(0.1, 0.5))
    sup = Supervisor(
        str(pipeline), load_topology(str(pipeline)), inputs,
        data_dir=data, workers=2, chunk_lines=200, progress=chaos,
        max_restarts=10_000, max_restart_backoff=BACKOFF_MAX, max_ingest_rate=1_500,
        worker_args=["--commit-interval", "0.1", "--session-timeout", "2"],
    )  # fmt: skip
    chaos.supervisor = sup
    try:
        sup.run()
        results = [
            (r.key, r.value)
            for q in range(sup.queue_counts[sink])
            for r in sup.broker.read(sink, q, 0)
        ]
    finally:
        sup.close()
    assert chaos.kills == 10
    return results


@pytest.mark.slow
def test_killed_workers_give_the_same_windows_once_each(tmp_path, monkeypatch) -> None:
    # Two workers, 8 queues, SIGKILLed at random and crashing at commit and restore:
    # restored tasks lose the watermarks they had read; the producers say them again.
    monkeypatch.setenv("RSTREAMS_FAULTS", "commit-start:0.02,txn-written:0.02,restore:0.05")
    expected = timed_text(tmp_path / "lines.txt", 6000)
    pipeline = write(tmp_path, "c.py", COUNT)
    inputs = {"lines": str(tmp_path / "lines.txt")}
    results = run_with_chaos(pipeline, inputs, "counts", tmp_path / "data")
    key_serde = get_serde("json")  # the sink's: the key is a Windowed again
    got = {json.dumps(key_serde.deserialize(k).to_dict()): json.loads(v) for k, v in results}
    assert len(results) == len(got)  # one result per window, none twice
    assert got == expected


@pytest.mark.slow
def test_killed_workers_give_every_match_once(tmp_path, monkeypatch) -> None:
    # A worker restores about 30 join tasks when it starts: at 5% a crash each, most
    # restarts would die before committing, and restarts without progress back off
    # (up to 5 s each by default; 1 s here, BACKOFF_MAX). 1% still crashes about one start in four.
    monkeypatch.setenv("RSTREAMS_FAULTS", "commit-start:0.02,txn-written:0.02,restore:0.01")
    orders, payments, matches = orders_and_payments(tmp_path, 2000)
    pipeline = write(tmp_path, "j.py", JOIN)
    inputs = {"orders": str(orders), "payments": str(payments)}
    results = run_with_chaos(pipeline, inputs, "matches", tmp_path / "data")
    got = {str(json.loads(k)): json.loads(v) for k, v in results}
    assert len(results) == len(got)  # each order has one payment: one match, none twice
    assert got == matches


def committed(data: Path, job: str, topics: tuple[str, ...]) -> tuple[int, bool]:
    """(records of ``topics`` committed, everything downstream caught up) of a job, as
    `rstreams offsets` shows them."""
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "offsets", job, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = [line.split("\t") for line in r.stdout.splitlines()[1:]] if r.returncode == 0 else []
    done = sum(int(c) for t, _, c, _, _ in rows if t in topics)
    return done, bool(rows) and all(int(c) == int(e) for _, _, c, e, _ in rows)


def sink_records(data: Path, job: str, topic: str) -> int:
    """Records in a job's sink topic, as `rstreams topics list` shows them."""
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "topics", "list", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    for line in r.stdout.splitlines():
        name, _, records = line.split("\t")
        if name == topic:
            return int(records.removeprefix("records="))
    return 0


def partial(data: Path) -> Path:
    """Where a followed run of data dir ``data`` writes its table (beside it: an output
    path is checked before the run creates its data dir)."""
    return data.with_name(f"{data.name}-partial.jsonl")


def follow_until_committed(
    pipeline: Path,
    data: Path,
    job: str,
    topics: dict[str, Path],
    records: int,
    sink: tuple[str, int] | None = None,
) -> None:
    """``rstreams run --follow`` until ``records`` of the inputs are committed (and, with
    ``sink``, that sink topic holds that many records), then stop it (SIGTERM: the
    workers commit and leave; no end of input is declared). No idle timeout: input files
    hold event time back only where they have records not yet read."""
    binds = [a for topic, path in topics.items() for a in ("--bind", f"{topic}={path}")]
    p = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "run", str(pipeline), *binds, "--follow",
         "--workers", "2", "--data-dir", str(data),
         "--output", str(partial(data))],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:
            done, caught_up = committed(data, job, tuple(topics))
            if (
                done >= records
                and caught_up
                and (sink is None or sink_records(data, job, sink[0]) >= sink[1])
            ):
                break
            assert p.poll() is None, p.communicate()[1][-3000:]
            out = f", {sink_records(data, job, sink[0])} of {sink[1]} out" if sink else ""
            assert time.monotonic() < deadline, f"{done} of {records} records committed{out}"
            time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err[-3000:]


SESSIONS = """
import json

from rstreams import SessionWindow, StreamBuilder


def build():
    b = StreamBuilder("clicks")
    (
        b.source("clicks")
        .map(json.loads)
        .selectTimestamp(lambda c: c["ts"])
        .keyBy(lambda c: c["user"])
        .window(SessionWindow(gap=30 * 60_000), emit="close")
        .count(name="sessions", queues=QUEUES)
        .toRStream()
        .sink("sessions")
    )
    return b
"""

LEFT_JOIN = """
import json

from rstreams import JoinWindow, StreamBuilder


def build():
    b = StreamBuilder("unpaid")
    orders = b.source("orders").map(json.loads).selectTimestamp(lambda o: o["t"])
    payments = b.source("payments").map(json.loads).selectTimestamp(lambda p: p["t"])
    (
        orders.leftJoin(payments)
        .where(lambda o: o["id"])
        .equalTo(lambda p: p["order"])
        .window(JoinWindow(before=0, after=10 * 60_000))
        .apply(lambda o, p: p["id"] if p else "unpaid", name="paid", queues=QUEUES)
        .sink("paid")
    )
    return b
"""


def clicks(path: Path) -> None:
    """Four hours of clicks by 8 users, in time order, in bursts 10 to 90 minutes apart."""
    rnd = random.Random(11)
    rows = []
    for u in range(8):
        t = rnd.randint(0, 3_600_000)
        while t < 4 * 3_600_000:
            for _ in range(rnd.randint(1, 12)):
                rows.append((t, f"u{u}"))
                t += rnd.randint(1_000, 120_000)
            t += rnd.randint(10, 90) * 60_000
    with path.open("w") as f:
        for t, user in sorted(rows):
            f.write(json.dumps({"user": user, "ts": t}) + "\n")


def shop(orders: Path, payments: Path) -> None:
    """An order every 2 minutes for 4 hours; two in three paid 1 to 15 minutes later,
    but the last 10 (still in their window when the last payment comes)."""
    rnd = random.Random(5)
    pays = []
    with orders.open("w") as f:
        for i in range(130):
            f.write(json.dumps({"id": i, "t": i * 120_000}) + "\n")
            if i % 3 and i < 120:
                pays.append((i * 120_000 + rnd.randint(1, 15) * 60_000, i))
    with payments.open("w") as f:
        for k, (t, i) in enumerate(sorted(pays)):
            f.write(json.dumps({"id": f"p{k}", "order": i, "t": t}) + "\n")


def driver_table(pipeline: Path, inputs: dict[str, Path], sink: str) -> dict[str, object]:
    """The sink's table as the test driver gives it, the inputs piped in time order and
    no end of input, with the number of records the sink got; keys as `--output` writes
    them. (With one queue after the shuffle: the driver judges time per task, by what
    each task has seen, so this is time over the whole input, one partition's.)"""
    rows = sorted(
        (json.loads(line).get("ts", json.loads(line).get("t")), topic, line)
        for topic, path in inputs.items()
        for line in path.read_text().splitlines()
    )
    with TopologyTestDriver(load_topology(str(pipeline))) as d:
        for _, topic, line in rows:
            d.pipe(topic, line)
        records = d.read(sink)
    rows = [json.loads(row_json(result_row(r.key, r.value))) for r in records]
    return {"records": len(records), "table": table_of(rows)}


@pytest.mark.slow
def test_a_followed_run_closes_sessions_and_emits_unmatched_rows_without_a_timeout(
    tmp_path,
) -> None:
    # Inputs under one ingest chunk land in one source queue of 8: the 7 others never
    # get a record, and must not hold event time back. A followed run then gives what
    # one partition gives with the same lines and no end of input: the sessions that
    # time closed, and the orders whose payment window passed unpaid.
    clicks(tmp_path / "clicks.jsonl")
    one = write(tmp_path, "s1.py", SESSIONS.replace("QUEUES", "1"))
    want = driver_table(one, {"clicks": tmp_path / "clicks.jsonl"}, "sessions")
    assert 10 < want["records"] < 30  # some sessions closed by time, not all
    sessions = write(tmp_path, "s.py", SESSIONS.replace("QUEUES", "4"))
    data = tmp_path / "s-data"
    inputs = {"clicks": tmp_path / "clicks.jsonl"}
    lines = len((tmp_path / "clicks.jsonl").read_text().splitlines())
    follow_until_committed(sessions, data, "clicks", inputs, lines, ("sessions", want["records"]))
    assert read_table(partial(data)) == want["table"]
    assert sink_records(data, "clicks", "sessions") == want["records"]  # nothing more

    shop(tmp_path / "orders.jsonl", tmp_path / "payments.jsonl")
    inputs = {"orders": tmp_path / "orders.jsonl", "payments": tmp_path / "payments.jsonl"}
    one = write(tmp_path, "j1.py", LEFT_JOIN.replace("QUEUES", "1"))
    want = driver_table(one, inputs, "paid")
    unpaid = [k for k, v in want["table"].items() if v == "unpaid"]
    assert len(unpaid) > 40 and len(want["table"]) < 130  # the last orders still wait
    join = write(tmp_path, "j.py", LEFT_JOIN.replace("QUEUES", "4"))
    data = tmp_path / "j-data"
    records = sum(len(p.read_text().splitlines()) for p in inputs.values())
    follow_until_committed(join, data, "unpaid", inputs, records, ("paid", want["records"]))
    assert read_table(partial(data)) == want["table"]
    assert sink_records(data, "unpaid", "paid") == want["records"]


@pytest.mark.slow
def test_a_run_stopped_and_resumed_in_the_middle_gives_the_worked_out_tables(tmp_path) -> None:
    # Half the input through a followed run with 8 queues and 2 workers, stopped (no end
    # of input); the rest appended; a bounded run resumes: the uninterrupted tables.
    full = tmp_path / "full.txt"
    expected = timed_text(full, 40_000)
    lines = full.read_text().splitlines(keepends=True)
    text = tmp_path / "lines.txt"
    text.write_text("".join(lines[:20_000]))
    count = write(tmp_path, "c.py", COUNT)
    data = tmp_path / "count-data"
    # (the first 20,000 lines span 800 s: 13 windows a word, 12 of them closed by time)
    follow_until_committed(count, data, "timed", {"lines": text}, 20_000, ("counts", 60))
    # What the stopped run wrote: windows closed by event time, with their final counts
    # (the state and the rest of the input are taken up by the resumed run, not read
    # again: counting the first half twice would double these).
    # (beside the data directory: an output's directory must exist before the run)
    rows = [json.loads(line) for line in partial(data).read_text().splitlines()]
    closed = {
        json.dumps({k: v for k, v in r.items() if k != "value"}): r["value"]
        for r in rows
        if r.get("closed")
    }
    assert len(closed) >= 60 and all(expected[k] == v for k, v in closed.items())
    with text.open("a") as f:
        f.write("".join(lines[20_000:]))
    got = rstreams_run(count, "--input", text, "--workers", "2", "--data-dir", data)
    assert got == expected

    orders_full, payments_full, matches = orders_and_payments(tmp_path, 20_000)
    halves = {}
    for topic, path in (("orders", orders_full), ("payments", payments_full)):
        rows = path.read_text().splitlines(keepends=True)
        part = tmp_path / f"part-{topic}.jsonl"
        part.write_text("".join(rows[: len(rows) // 2]))
        halves[topic] = (part, rows[len(rows) // 2 :], len(rows) // 2)
    join = write(tmp_path, "j.py", JOIN)
    data = tmp_path / "join-data"
    first = sum(n for _, _, n in halves.values())
    follow_until_committed(join, data, "pay", {t: p for t, (p, _, _) in halves.items()}, first)
    for part, rest, _ in halves.values():
        with part.open("a") as f:
            f.write("".join(rest))
    binds = [a for t, (p, _, _) in halves.items() for a in ("--bind", f"{t}={p}")]
    assert rstreams_run(join, *binds, "--workers", "2", "--data-dir", data) == matches
