"""A task's lifecycle: the states it goes through and the moves allowed between them,
as Kafka Streams' ``Task.State``.

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

from rstreams.errors import IllegalStateError

__all__ = ["TRANSITIONS", "Lifecycle", "TaskState"]


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
