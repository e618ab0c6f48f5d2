"""Lifecycles: the states a task, a worker and the supervisor go through and the moves
allowed between them (a table per kind, as Kafka Streams' ``Task.State``).

A task's (:class:`TaskState`, :data:`TRANSITIONS`):

::

    CREATED -> RESTORING -> RUNNING -> CLOSED
                   |           |  \\
                   |           |   FAILED
                   v           v   v
                   +-------> ABANDONED

A task is built (RESTORING: its stores open, the last transaction is finished, the
changelogs are replayed), then runs. If processing or a commit raises it FAILED: it
still processes (the test driver goes on piping) but commits nothing more, so the
failed record and everything after it is read again on restart. Closing a running task
commits it first (CLOSED); closing a failed one, or abandoning one (damaged state was
found), closes its stores without committing (ABANDONED).

>>> lc = Lifecycle("0_0")
>>> lc.to(TaskState.RESTORING); lc.to(TaskState.RUNNING); lc.state.name
'RUNNING'
>>> lc.to(TaskState.RESTORING)
Traceback (most recent call last):
...
rstreams.errors.IllegalStateError: task 0_0: invalid transition from RUNNING to RESTORING
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Generic, TypeVar

from rstreams.errors import IllegalStateError

__all__ = [
    "SUPERVISOR_TRANSITIONS",
    "TRANSITIONS",
    "WORKER_TRANSITIONS",
    "Lifecycle",
    "StateMachine",
    "SupervisorState",
    "TaskState",
    "WorkerState",
]

S = TypeVar("S", bound=enum.Enum)


class TaskState(enum.Enum):
    """Where a task is in its life (see the module's diagram)."""

    CREATED = "created"
    RESTORING = "restoring"
    RUNNING = "running"
    FAILED = "failed"
    #: Committed, then closed.
    CLOSED = "closed"
    #: Closed without committing what it did since its last commit.
    ABANDONED = "abandoned"


#: The states each state may move to.
TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.CREATED: frozenset({TaskState.RESTORING}),
    TaskState.RESTORING: frozenset({TaskState.RUNNING, TaskState.ABANDONED}),
    TaskState.RUNNING: frozenset({TaskState.FAILED, TaskState.CLOSED, TaskState.ABANDONED}),
    TaskState.FAILED: frozenset({TaskState.ABANDONED}),
    TaskState.CLOSED: frozenset(),
    TaskState.ABANDONED: frozenset(),
}

# The members as globals: an enum member read from its class costs ten times a global.
_RUNNING, _FAILED = TaskState.RUNNING, TaskState.FAILED


class Lifecycle:
    """The state of task ``name``, moved only along :data:`TRANSITIONS`.

    Also the one place that marks the task failed: ``with lifecycle:`` around work
    that may raise checks the task processes at all (it is not closed) and, should the
    work raise, marks the task FAILED before the error goes on.
    """

    __slots__ = ("name", "state")

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = TaskState.CREATED

    def to(self, new: TaskState) -> None:
        """Move to ``new``; raises :class:`~rstreams.errors.IllegalStateError` if it
        can not follow the current state."""
        if new not in TRANSITIONS[self.state]:
            raise IllegalStateError(
                f"task {self.name}: invalid transition from {self.state.name} to {new.name}"
            )
        self.state = new

    def fail(self) -> None:
        """Mark a running task FAILED. A task already failed or closed stays as it is:
        either way nothing more of it is committed (and this runs while an error is on
        its way out: it must not replace it)."""
        if self.state is _RUNNING:
            self.to(_FAILED)

    def check(self) -> None:
        """Raise :class:`~rstreams.errors.IllegalStateError` unless the task processes:
        RUNNING, or FAILED (it processes, and commits nothing). What ``with`` checks;
        hot paths call it only when the state is not RUNNING, and mark the task failed
        themselves (:meth:`fail`) should their work raise."""
        # Identity tests: an enum member hashes in Python.
        state = self.state
        if state is not _RUNNING and state is not _FAILED:
            raise IllegalStateError(f"task {self.name} is {self.state.name}: it can not process")

    __enter__ = check

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            self.fail()


# -- the supervisor's and the workers' states ----------------------------------------------


class SupervisorState(str, enum.Enum):
    """Where the supervisor of a durable run is. A ``str``: the value is what
    ``supervisor.json`` says as ``"state"`` (read by ``rstreams top``, the live view and
    ``--metrics-port``), so these strings are part of that file's format.

    ::

        STARTING -> RUNNING -> DONE
             \\          \\
              +---------+-> FAILED

    STARTING is never published: the first ``supervisor.json`` of a run says RUNNING.

    >>> SupervisorState.RUNNING == "running", SupervisorState("done")
    (True, <SupervisorState.DONE: 'done'>)
    """

    STARTING = "starting"
    RUNNING = "running"
    #: Input processed and committed (a bounded run), or a ``follow`` run stopped.
    DONE = "done"
    FAILED = "failed"

    # Shown as its value, as the file has it (Python 3.10's str mixin shows the name).
    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


#: The states each supervisor state may move to.
SUPERVISOR_TRANSITIONS: dict[SupervisorState, frozenset[SupervisorState]] = {
    SupervisorState.STARTING: frozenset({SupervisorState.RUNNING, SupervisorState.FAILED}),
    SupervisorState.RUNNING: frozenset({SupervisorState.DONE, SupervisorState.FAILED}),
    SupervisorState.DONE: frozenset(),
    SupervisorState.FAILED: frozenset(),
}


class WorkerState(enum.Enum):
    """Where a worker process of the durable runtime is.

    ::

        CREATED -> RUNNING -> STOPPING -> LEFT
           |   \\       \\         |       ^
           |    \\       +-> FAILED -----+
           |     +-> STOPPING           |
           +--------------------------->+

    RUNNING: it joined the group and takes turns (:meth:`Worker.step`). STOPPING: it
    was asked to stop (a signal, or its supervisor is gone) and takes no new task.
    FAILED: an error escaped a turn (a failing disk): it commits nothing more. LEFT: it
    gave its tasks up and left the group.
    """

    CREATED = "created"
    RUNNING = "running"
    STOPPING = "stopping"
    FAILED = "failed"
    LEFT = "left"


#: The states each worker state may move to. A worker asked to stop before it joined
#: leaves without ever running; one that never joined may still be left (closed).
WORKER_TRANSITIONS: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.CREATED: frozenset({WorkerState.RUNNING, WorkerState.STOPPING, WorkerState.LEFT}),
    WorkerState.RUNNING: frozenset({WorkerState.STOPPING, WorkerState.FAILED, WorkerState.LEFT}),
    WorkerState.STOPPING: frozenset({WorkerState.FAILED, WorkerState.LEFT}),
    WorkerState.FAILED: frozenset({WorkerState.LEFT}),
    WorkerState.LEFT: frozenset(),
}


class StateMachine(Generic[S]):
    """The state of ``name``, moved only along ``table`` (a state -> the states that
    may follow it), from ``start``.

    >>> m = StateMachine("supervisor", SUPERVISOR_TRANSITIONS, SupervisorState.STARTING)
    >>> m.to(SupervisorState.RUNNING); m.to(SupervisorState.DONE); m.state.value
    'done'
    >>> m.to(SupervisorState.RUNNING)
    Traceback (most recent call last):
    ...
    rstreams.errors.IllegalStateError: supervisor: invalid transition from DONE to RUNNING
    """

    __slots__ = ("name", "state", "table")

    def __init__(self, name: str, table: Mapping[S, frozenset[S]], start: S) -> None:
        self.name = name
        self.table = table
        self.state = start

    def to(self, new: S) -> None:
        """Move to ``new``; raises :class:`~rstreams.errors.IllegalStateError` if it
        can not follow the current state."""
        if new not in self.table[self.state]:
            raise IllegalStateError(
                f"{self.name}: invalid transition from {self.state.name} to {new.name}"
            )
        self.state = new

    def can(self, new: S) -> bool:
        """Whether ``new`` may follow the current state."""
        return new in self.table[self.state]

    def __repr__(self) -> str:
        return f"StateMachine({self.name!r}, {self.state.name})"
