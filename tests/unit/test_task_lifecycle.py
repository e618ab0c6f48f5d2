"""A task's lifecycle: the states it moves through, through the task's own API."""

from __future__ import annotations

import pytest

from rstreams import ProcessingError, StreamBuilder
from rstreams.errors import IllegalStateError, RStreamsError
from rstreams.runtime.engine import EngineConfig, LocalEngine
from rstreams.runtime.engine.tasks.lifecycle import TRANSITIONS, Lifecycle, TaskState
from rstreams.runtime.engine.tasks.task import Task
from rstreams.runtime.queues import MemoryBroker


def _check(v: str) -> str:
    if v == "bad":
        raise ValueError("bad value")
    return v


def one_task() -> tuple[LocalEngine, MemoryBroker, Task]:
    b = StreamBuilder("life")
    b.source("in", queues=1).map(_check, name="check").sink("out")
    broker = MemoryBroker()
    engine = LocalEngine(b.build(), broker, EngineConfig())
    (task,) = engine.tasks
    return engine, broker, task


def append(broker: MemoryBroker, *values: str) -> None:
    broker.append("in", 0, [(0, None, v.encode(), ()) for v in values])


def test_a_built_task_runs_and_a_close_commits_then_closes_it() -> None:
    _, broker, task = one_task()
    assert task.state is TaskState.RUNNING and not task.failed
    append(broker, "a", "b")
    assert task.poll(10) == 2
    task.close()
    assert task.state is TaskState.CLOSED and not task.failed
    assert task.committed == {"in": 2}  # the close committed
    task.close()  # closing again does nothing
    assert task.state is TaskState.CLOSED


def test_a_failed_task_commits_nothing_more_and_is_abandoned_when_closed() -> None:
    _, broker, task = one_task()
    append(broker, "a")
    task.poll(10)
    task.commit()
    append(broker, "bad")
    with pytest.raises(ProcessingError, match="bad value"):
        task.poll(10)
    assert task.state is TaskState.FAILED and task.failed
    append(broker, "c")
    assert task.poll(10) == 1  # a failed task still processes...
    assert task.commit() == [] and task.committed == {"in": 1}  # ...but commits nothing
    task.mark_failed()  # failing again changes nothing
    assert task.state is TaskState.FAILED
    task.close()
    assert task.state is TaskState.ABANDONED and task.failed
    assert task.committed == {"in": 1}


def test_an_abandoned_task_commits_nothing() -> None:
    _, broker, task = one_task()
    append(broker, "a")
    task.poll(10)
    task.abandon()
    assert task.state is TaskState.ABANDONED and task.failed
    assert task.committed == {"in": 0}
    task.close()  # already closed
    assert task.state is TaskState.ABANDONED


def test_a_closed_task_refuses_work_and_invalid_transitions() -> None:
    _, broker, task = one_task()
    task.close()
    append(broker, "a")
    for work in (lambda: task.poll(10), lambda: task.punctuate(0), task.end_of_input):
        with pytest.raises(IllegalStateError, match="task 0_0 is CLOSED: it can not process"):
            work()
    with pytest.raises(IllegalStateError, match="it can not commit"):
        task.commit()
    with pytest.raises(IllegalStateError, match="invalid transition from CLOSED to ABANDONED"):
        task.abandon()
    task.mark_failed()  # nothing more is committed of a closed task either way
    assert task.state is TaskState.CLOSED and not task.failed


def test_the_error_is_an_rstreams_error_and_a_runtime_error() -> None:
    assert issubclass(IllegalStateError, RStreamsError)
    assert issubclass(IllegalStateError, RuntimeError)


@pytest.mark.parametrize("start", list(TaskState))
def test_only_the_listed_transitions_are_allowed(start: TaskState) -> None:
    for new in TaskState:
        lc = Lifecycle("t")
        lc.state = start
        if new in TRANSITIONS[start]:
            lc.to(new)
            assert lc.state is new
        else:
            with pytest.raises(IllegalStateError, match=f"from {start.name} to {new.name}"):
                lc.to(new)
            assert lc.state is start


def test_closed_states_are_final() -> None:
    assert TRANSITIONS[TaskState.CLOSED] == TRANSITIONS[TaskState.ABANDONED] == frozenset()
    assert TRANSITIONS[TaskState.CREATED] == {TaskState.RESTORING}
