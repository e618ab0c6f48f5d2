"""What a worker needs of its consumer group, whatever keeps it (files or Redis).

:class:`GroupMembership` is the protocol both
:class:`~rstreams.runtime.rebalance.membership.FileGroupMembership` and
:class:`~rstreams.runtime.rebalance.redis_membership.RedisGroupMembership` implement; the
contract test (tests/redis/test_membership_contract.py) runs the same checks on both.

The semantics every implementation keeps:

- ``generation()`` moves on every membership change (join, leave, a member found gone)
  and on ``bump()``; members rebalance when it moves.
- ``members()`` lists the live members, sorted, and drops the ones found dead (bumping
  the generation once for them).
- A task is held by at most one member at a time (``acquire_task`` is exclusive); the
  old owner commits before ``release_task``.
- ``wait_for_change(timeout)`` returns True as soon as the generation differs from the
  one this member last saw, False after ``timeout`` seconds without a change.
- ``lost_tasks()`` lists the tasks this member held and lost without releasing them
  (another member took them after its lease ran out): they must stop without
  committing, then be released. Files never lose a task (the kernel holds the lock for as
  long as the process lives), so there it is always empty.
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable


@runtime_checkable
class GroupMembership(Protocol):
    """One member's handle on its consumer group."""

    member_id: str
    group: str
    session_timeout: float
    #: Whether a task's commits are fenced by its ownership (``task_fence(task)`` gives
    #: the broker's check): a member whose lease ran out can not commit. Files: False
    #: (one host: a store lock keeps two workers off one task's state).
    fences_commits: bool

    def generation(self) -> int:
        """The group's generation number."""
        ...

    def bump(self) -> int:
        """Increment the generation (tells every member to rebalance); the new value."""
        ...

    def join(self) -> None:
        """Become a live member (and bump the generation)."""
        ...

    def heartbeat(self) -> None:
        """Tell the group this member is alive (and keep its tasks)."""
        ...

    def leave(self) -> None:
        """Release every task, leave the group and tell the others."""
        ...

    def members(self) -> list[str]:
        """Live members, sorted; dead ones are dropped (and the generation bumped)."""
        ...

    def describe(self) -> dict[str, dict[str, object]]:
        """Live members with their pid and heartbeat age (``heartbeat_age_s``)."""
        ...

    def acquire_task(self, task: str) -> bool:
        """Take ``task``; False while another member holds it."""
        ...

    def release_task(self, task: str) -> None:
        """Give ``task`` back (after its last commit)."""
        ...

    def task_owners(self) -> dict[str, str]:
        """Task -> member holding it (free tasks are left out)."""
        ...

    @property
    def held_tasks(self) -> list[str]:
        """The tasks this member holds, sorted."""
        ...

    def lost_tasks(self) -> list[str]:
        """Tasks this member held and lost without releasing them, sorted."""
        ...

    def wait_for_change(self, timeout: float) -> bool:
        """True as soon as the generation moved since this member last saw it; False
        after ``timeout`` seconds (0: just look)."""
        ...

    def idle(self, timeout: float, stop: threading.Event) -> None:
        """Wait up to ``timeout`` seconds for work: return early when ``stop`` is set, or,
        where the group pushes its changes, as soon as the generation moves (then the
        worker rebalances at once). What a worker does when it has nothing to do."""
        ...
