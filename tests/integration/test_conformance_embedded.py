"""Every example gives the same final tables on the test driver, the in-process engine
and the durable runtime (2 workers, file log, RocksDB, exactly-once), and for the
examples of event time, the tables worked out from their data by hand."""

from __future__ import annotations

import collections
import itertools
import json
import runpy
from datetime import datetime
from pathlib import Path

import pytest

from rstreams import Topology, run
from rstreams.testing import TopologyTestDriver

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data"
#: Pipelines with uneven queues (their ``build()`` and ``lines()``: topic -> lines).
UNEVEN = Path(__file__).resolve().parents[1] / "pipelines"

CASES = {
    "wordcount": {"sentences": DATA / "corpus.txt"},
    "branching": {"lines": DATA / "corpus.txt"},
    "stats": {"lines": DATA / "corpus.txt"},
    "windowed_wordcount": {"timed-sentences": DATA / "timed_sentences.txt"},
    "sessions": {"clicks": DATA / "clicks.jsonl"},
    "order_payment_join": {"orders": DATA / "orders.jsonl", "payments": DATA / "payments.jsonl"},
    "access_log": {"access-log": DATA / "access.log"},
    "enrichment": {"shop": DATA / "shop.jsonl"},
}


def driver_tables(topology, inputs: dict[str, Path]) -> dict[str, dict]:
    """The final tables on the test driver. The driver keeps one stream time for both
    sides of a join, as one partition would: the records of several inputs are piped in
    the order their events happened (the runtimes track each input's time apart)."""
    records = [
        (json.loads(line)["ts"] if len(inputs) > 1 else 0, i, topic, line)
        for topic, path in inputs.items()
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines())
    ]
    with TopologyTestDriver(topology) as d:
        for _, _, topic, line in sorted(records, key=lambda r: r[:2]):
            d.pipe(topic, line.encode("utf-8"), timestamp=0)  # the raw line, as a file gives it
        d.end_of_input()
        return {t: d.read_table(t) for t in topology.sink_topics}


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(CASES))
def test_same_final_tables_everywhere(example, tmp_path) -> None:
    path = str(ROOT / "examples" / f"{example}.py")
    topology = runpy.run_path(path)["build"]().build()
    inputs = {t: str(p) for t, p in CASES[example].items()}
    expected = driver_tables(topology, CASES[example])
    assert all(expected.values()), "every sink produces something"
    in_memory = run(topology, inputs).tables
    durable = run(topology, inputs, data_dir=str(tmp_path / "d"), workers=2, pipeline=path).tables
    assert in_memory == expected
    assert durable == expected


def uneven_case(path: Path, tmp_path: Path) -> tuple[Topology, dict[str, str], dict[str, dict]]:
    """The topology of a pipeline of tests/pipelines, its input files (written into
    ``tmp_path``) and the driver's final tables of them."""
    module = runpy.run_path(str(path))
    topology = module["build"]().build()
    data: dict[str, list[str]] = module["lines"]()
    inputs = {}
    for topic, lines in data.items():
        inputs[topic] = str(tmp_path / f"{topic}.txt")
        Path(inputs[topic]).write_text("\n".join(lines) + "\n", encoding="utf-8")
    with TopologyTestDriver(topology) as d:
        for topic, lines in data.items():  # topic after topic (source order)
            for line in lines:
                d.pipe(topic, line.encode("utf-8"))
        d.end_of_input()
        return topology, inputs, {t: d.read_table(t) for t in topology.sink_topics}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["uneven_count", "uneven_join"])
def test_uneven_queues_give_the_same_tables_everywhere(name, tmp_path) -> None:
    # One queue of a step far ahead in event time of another: each record is judged by
    # the time of the whole step (docs/windows.md, event time), not by its queue's.
    path = UNEVEN / f"{name}.py"
    topology, inputs, expected = uneven_case(path, tmp_path)
    assert all(expected.values())
    if name == "uneven_count":
        # "a" is in order by itself: none of it is late by its own queue's time.
        assert len(expected["late-events"]) > 10
        assert all(line.startswith("a ") for line in expected["late-events"])
    assert run(topology, inputs).tables == expected
    for workers in (1, 2):
        data_dir = str(tmp_path / f"data-{workers}")
        durable = run(topology, inputs, data_dir=data_dir, workers=workers, pipeline=str(path))
        assert durable.tables == expected, f"{workers} worker(s)"


@pytest.mark.slow
def test_what_closes_before_the_end_is_the_same_everywhere(tmp_path) -> None:
    # After a keyBy into three queues, some queues get their last record long before the
    # input ends. A window closes by event time once the input's time passed it, whether
    # or not its queue gets a later record: before the end of input on every backend
    # (closed="event-time"), only the windows the last timestamp did not pass at the end
    # ("end-of-input"). Not only the final counts: which windows close before the end.
    path = UNEVEN / "closing_count.py"
    module = runpy.run_path(str(path))
    topology, inputs, _ = uneven_case(path, tmp_path)
    expected = module["expected"]()
    assert {c for _, _, c, _ in expected} == {"event-time", "end-of-input"}
    # The driver, record by record: what it emits before the end of input is exactly
    # what closes by event time, in the order the input's time passed each window.
    with TopologyTestDriver(topology) as d:
        for line in module["lines"]()["events"]:
            d.pipe("events", line.encode("utf-8"))
        before = d.read("counts")
        d.end_of_input()
        after = d.read("counts")
    assert {r.key.closed for r in before} == {"event-time"}
    assert {r.key.closed for r in after} == {"end-of-input"}
    assert [r.key.start + 100 for r in before] == sorted(r.key.start + 100 for r in before)
    labelled = module["labelled"]
    assert labelled({r.key: r.value for r in before + after}) == expected
    assert labelled(run(topology, inputs).tables["counts"]) == expected, "in memory"
    for workers in (1, 2):
        data_dir = str(tmp_path / f"data-{workers}")
        durable = run(topology, inputs, data_dir=data_dir, workers=workers, pipeline=str(path))
        assert labelled(durable.tables["counts"]) == expected, f"{workers} worker(s)"


# -- the examples of event time, worked out from their data ---------------------------------


def jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines()]


def example_topology(name: str):
    return runpy.run_path(str(ROOT / "examples" / f"{name}.py"))["build"]().build()


def test_sessions_are_the_clicks_at_most_30_minutes_apart() -> None:
    clicks = jsonl("clicks.jsonl")
    assert len(clicks) >= 300 and any(a["ts"] > b["ts"] for a, b in itertools.pairwise(clicks))
    by_user = collections.defaultdict(list)
    for c in clicks:
        by_user[c["user"]].append(c["ts"])
    expected = {}
    for user, times in by_user.items():
        times.sort()
        start = prev = times[0]
        n = 0
        for t in times:
            if t - prev > 30 * 60_000:
                expected[(user, start, prev)] = n
                start, n = t, 0
            prev, n = t, n + 1
        expected[(user, start, prev)] = n
    tables = driver_tables(example_topology("sessions"), CASES["sessions"])
    got = {(w.key, w.start, w.end): n for w, n in tables["session-clicks"].items()}
    assert got == expected
    assert sum(got.values()) == len(clicks)


def test_orders_are_paid_within_5_minutes_or_unmatched() -> None:
    orders, payments = jsonl("orders.jsonl"), jsonl("payments.jsonl")
    paid_at = {p["order"]: p for p in payments}
    expected = {}
    for o in orders:
        p = paid_at.get(o["order"])
        on_time = p is not None and 0 <= p["ts"] - o["ts"] <= 5 * 60_000
        expected[o["order"]] = {"amount": o["amount"], "paid": p["paid"] if on_time else None}
    late = sum(1 for o in orders if o["order"] in paid_at and expected[o["order"]]["paid"] is None)
    assert late > 0 and len(paid_at) < len(orders)  # late payments and unpaid orders
    tables = driver_tables(example_topology("order_payment_join"), CASES["order_payment_join"])
    assert tables["order-payments"] == expected


def test_access_log_hits_and_server_errors_per_hour() -> None:
    hits: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[tuple[str, int]] = collections.Counter()
    for line in (DATA / "access.log").read_text(encoding="utf-8").splitlines():
        time = line.split("[", 1)[1].split("]", 1)[0]
        path, status = line.split('"')[1].split()[1], int(line.split('"')[2].split()[0])
        hits[path] += 1
        if status >= 500:
            ts = int(datetime.strptime(time, "%d/%b/%Y:%H:%M:%S %z").timestamp() * 1000)
            errors[(path, ts - ts % 3_600_000)] += 1
    tables = driver_tables(example_topology("access_log"), CASES["access_log"])
    assert tables["hits-per-path"] == hits
    got = {(w.key, w.start): n for w, n in tables["server-errors-per-hour"].items()}
    assert got == errors
    assert max(got, key=got.get)[0] == "/api/stock"  # the outage stands out
