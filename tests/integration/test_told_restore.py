"""A restarted producer tells each step the time it had told that step, not its own.

A source task that feeds several windowed steps, each through a shuffle of its own
with that task as its only producer, tells each step the largest timestamp it sent to
*that* step (rstreams/semantics/clock.py, told inputs): branches filtered apart reach
different times. A new owner of the task (a restart) must go on from those times, each
step's own: told the task-wide time instead, a step whose branch lags would close
windows, and take records for late, that an uninterrupted run keeps open
(tests/pipelines/branches.py). Exactly once, the times are kept in the task's
transactions; at least once, with its offsets.

The pipeline runs on the test driver, on the in-process engine without and with
restarts (random cuts, batch sizes and queue counts too), and on the durable runtime:
every sink holds the same table and the same records.
"""

from __future__ import annotations

import runpy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstreams import Topology, run
from rstreams.runtime.engine import EngineConfig
from rstreams.runtime.queues import MemoryBroker
from rstreams.testing import TopologyTestDriver
from tests.helpers.restarts import fold, label, run_with_restarts

PATH = Path(__file__).resolve().parents[1] / "pipelines" / "branches.py"
BRANCHES = runpy.run_path(str(PATH))
GUARANTEES = ("exactly-once", "at-least-once")

Sinks = dict[str, tuple[dict[Any, Any], Counter[tuple[Any, Any]]]]


def topology(queues: int = 2, grace: int = 0) -> Topology:
    return BRANCHES["pipeline"](queues, grace).build()


def on_driver(t: Topology, lines: list[str]) -> Sinks:
    with TopologyTestDriver(t) as d:
        for line in lines:
            d.pipe("events", line.encode("utf-8"))
        d.end_of_input()
        return {s: fold([(r.key, r.value) for r in d.read(s)]) for s in t.sink_topics}


def on_engine(t: Topology, lines: list[str], guarantee: str, batch: int, cuts: list[int]) -> Sinks:
    """The lines by a new engine per part (parts end at ``cuts``: a restart, the engine
    before it committed and closed), ``batch`` records at a time."""
    config = EngineConfig(batch_size=batch, guarantee=guarantee)

    def append(broker: MemoryBroker, lo: int, hi: int) -> None:
        if hi > lo:
            broker.append("events", 0, [(0, None, line.encode(), ()) for line in lines[lo:hi]])

    runs = run_with_restarts(t, config, len(lines), cuts, append)
    return {s: fold(records) for s, records in runs.items()}


LINES: list[str] = BRANCHES["lines"]()["events"]
CUT: int = BRANCHES["CUT"]


@pytest.mark.fast
def test_the_lagging_branch_has_no_late_record_uninterrupted() -> None:
    expected = on_driver(topology(), LINES)
    assert expected["late-b"][0] == {}
    assert expected["b"][0][("x", 20, 30, "event-time")] == 2  # x 20 and x 21
    assert on_engine(topology(), LINES, "exactly-once", 1000, []) == expected


#: The least case: restarted after ``x 10 A``, the producer had told step ``b`` nothing;
#: told 10 (the task's time), it took ``x 0 B`` for late.
LEAST = ["x 10 A", "x 0 B"]


@pytest.mark.fast
@pytest.mark.parametrize("guarantee", GUARANTEES)
@pytest.mark.parametrize("batch", [1, 1000])
@pytest.mark.parametrize(("lines", "cut"), [(LINES, CUT), (LEAST, 1)], ids=["lines", "least"])
def test_a_restart_tells_each_step_its_own_time(
    guarantee: str, batch: int, lines: list[str], cut: int
) -> None:
    """Restarted after ``A`` got to 100, the producer tells step ``b`` 20, where it had
    got (not 100): ``x 21``, ``y 25`` and ``x 33`` are not late."""
    expected = on_driver(topology(), lines)
    assert expected["late-b"][0] == {}
    assert on_engine(topology(), lines, guarantee, batch, [cut]) == expected


@st.composite
def branch_lines(draw: st.DrawFn) -> list[str]:
    """Up to 30 lines; each branch in time order by itself, the two far apart."""
    rows = draw(
        st.lists(
            st.tuples(st.sampled_from("AB"), st.integers(0, 12), st.sampled_from("xy")),
            min_size=1,
            max_size=30,
        )
    )
    now = {"A": 0, "B": 0}
    out = []
    for branch, step, key in rows:
        now[branch] += step
        out.append(f"{key} {now[branch]} {branch}")
    return out


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_restarts_give_the_drivers_tables_whatever_the_branches_times(
    data: st.DataObject,
) -> None:
    lines = data.draw(branch_lines(), label="lines")
    grace = data.draw(st.sampled_from([0, 3]), label="grace")
    queues = data.draw(st.sampled_from([1, 2, 3]), label="queues")
    guarantee = data.draw(st.sampled_from(GUARANTEES), label="guarantee")
    batch = data.draw(st.sampled_from([1, 2, 1000]), label="batch")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(lines)), max_size=3), label="cuts"))
    t = topology(queues, grace)
    expected = on_driver(topology(1, grace), lines)
    assert on_driver(t, lines) == expected, "driver"
    assert on_engine(t, lines, guarantee, batch, cuts) == expected, "engine"


@pytest.mark.slow
def test_the_durable_runtime_gives_the_drivers_tables(tmp_path: Path) -> None:
    t = BRANCHES["build"]().build()
    path = tmp_path / "events.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    expected = {s: table for s, (table, _) in on_driver(t, LINES).items()}
    for workers in (1, 2):
        durable = run(
            t, {"events": str(path)}, data_dir=str(tmp_path / f"d{workers}"),
            workers=workers, pipeline=str(PATH),
        )  # fmt: skip
        got = {s: {label(k): v for k, v in durable.tables[s].items()} for s in t.sink_topics}
        assert got == expected, f"{workers} worker(s)"
