"""The supervisor's and the workers' states: every move their tables allow, and no
other; the supervisor's states are the strings ``supervisor.json`` has always held."""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile

import pytest

from rstreams.errors import IllegalStateError
from rstreams.runtime.engine.tasks.lifecycle import (
    SUPERVISOR_TRANSITIONS,
    TRANSITIONS,
    WORKER_TRANSITIONS,
    StateMachine,
    SupervisorState,
    TaskState,
    WorkerState,
)

pytestmark = pytest.mark.fast

TABLES = [
    ("supervisor", SupervisorState, SUPERVISOR_TRANSITIONS),
    ("worker", WorkerState, WORKER_TRANSITIONS),
    ("task", TaskState, TRANSITIONS),
]


@pytest.mark.parametrize(("name", "states", "table"), TABLES, ids=[t[0] for t in TABLES])
def test_each_table_names_every_state_and_ends_somewhere(name, states, table) -> None:
    assert set(table) == set(states)
    assert all(set(moves) <= set(states) for moves in table.values())
    ends = [s for s, moves in table.items() if not moves]
    assert ends, f"{name}: no final state"
    for state in states:  # every state can reach a final one
        seen, todo = {state}, [state]
        while todo:
            for nxt in table[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert seen & set(ends), (name, state)


@pytest.mark.parametrize(("name", "states", "table"), TABLES[:2], ids=["supervisor", "worker"])
def test_a_machine_moves_only_along_its_table(name, states, table) -> None:
    for old, new in itertools.product(states, states):
        machine = StateMachine(name, table, old)
        assert machine.can(new) == (new in table[old])
        if new in table[old]:
            machine.to(new)
            assert machine.state is new
        else:
            with pytest.raises(IllegalStateError, match=f"{name}: invalid transition from"):
                machine.to(new)
            assert machine.state is old


def test_the_supervisor_states_are_the_files_strings() -> None:
    assert [s.value for s in SupervisorState] == ["starting", "running", "done", "failed"]
    assert json.dumps({"state": SupervisorState.DONE}) == '{"state": "done"}'
    assert SupervisorState.RUNNING == "running" and f"{SupervisorState.FAILED}" == "failed"
    # Readers compare what they read from the file with the members.
    assert json.loads('{"state": "running"}')["state"] == SupervisorState.RUNNING


def test_a_worker_goes_created_running_stopping_left() -> None:
    from rstreams import StreamBuilder
    from rstreams.runtime.engine.coordination.worker import Worker, open_broker

    b = StreamBuilder("states")
    b.source("in", queues=1).map(str.upper).sink("out")
    root = tempfile.mkdtemp()
    broker = open_broker(root)
    try:
        worker = Worker(b.build(), broker, root, member_id="w")
        assert worker.state is WorkerState.CREATED
        worker.join(now=0.0)
        assert worker.state is WorkerState.RUNNING
        worker.stop()
        worker.stop()  # (a second signal changes nothing)
        assert worker.state is WorkerState.STOPPING
        worker.leave()
        assert worker.state is WorkerState.LEFT
        with pytest.raises(IllegalStateError, match="from LEFT to RUNNING"):
            worker.join(now=1.0)
    finally:
        broker.close()
        shutil.rmtree(root)
