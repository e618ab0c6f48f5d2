"""Group membership through files in the data directory (no server needed).

Layout under ``<root>/coordination/<group>/`` (see rstreams.runtime.layout)::

    generation            the group's generation number; bumped on every membership change
    coordinator.lock      serializes bumps
    members/<id>.lock     held (flock, exclusive) by the live member <id> for its lifetime
    members/<id>.json     pid, start time and last heartbeat of member <id>
    tasks/<task>.lock     held by the member currently running task <task>

A member is alive while it holds its lock: the kernel releases the lock the moment the
process dies (even on ``kill -9``), so a survivor that can take the lock knows at once.
A member whose heartbeat is older than the session timeout (a hung process) is treated as
gone as well. Whoever notices a change bumps the generation; members watch the generation
and rebalance when it moves (they also rebalance periodically).

Task locks make hand-over safe: the old owner of a task commits before it releases the
task's lock, and the new owner starts the task only once it holds the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from pathlib import Path
from typing import IO

from rstreams.config import WorkerConfig
from rstreams.options import field_default
from rstreams.runtime.layout import GroupLayout

#: A membership's session timeout unless given: the workers' option's default.
SESSION_TIMEOUT: float = field_default(WorkerConfig, "session_timeout")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _try_lock(f: IO[str], shared: bool = False) -> bool:
    try:
        fcntl.flock(f, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class FileGroupMembership:
    """One member's view of a consumer group kept in files.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> a = FileGroupMembership(root, "g", "a"); b = FileGroupMembership(root, "g", "b")
    >>> a.join(); b.join()
    >>> a.members()
    ['a', 'b']
    >>> b.leave(); a.members()
    ['a']
    """

    #: (one host: a store lock keeps two workers off one task's state)
    fences_commits = False

    def __init__(
        self,
        root: str | os.PathLike[str],
        group: str,
        member_id: str,
        session_timeout: float = SESSION_TIMEOUT,
    ) -> None:
        self.layout = GroupLayout.of(root, group)
        self.dir = self.layout.dir
        self.members_dir = self.layout.members
        self.tasks_dir = self.layout.tasks
        for d in (self.members_dir, self.tasks_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.group = group
        self.member_id = member_id
        self.session_timeout = session_timeout
        self._lock_file: IO[str] | None = None
        self._task_locks: dict[str, IO[str]] = {}
        self.started = time.time()
        self._seen = -1  # the generation this member last read

    # -- generation ----------------------------------------------------------------------

    def generation(self) -> int:
        self._seen = self._read_generation()
        return self._seen

    def _read_generation(self) -> int:
        try:
            return int(self.layout.generation.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def wait_for_change(self, timeout: float, poll: float = 0.05) -> bool:
        """True as soon as the generation moved since this member last read it (by
        :meth:`generation` or here); False after ``timeout`` seconds. Files push nothing:
        this looks every ``poll`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            gen = self._read_generation()
            if gen != self._seen:
                self._seen = gen
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(poll, remaining))

    def bump(self) -> int:
        """Increment the generation (tells every member to rebalance)."""
        with open(self.layout.coordinator_lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            gen = self._read_generation() + 1
            _write_atomic(self.layout.generation, str(gen))
            return gen

    # -- own membership ------------------------------------------------------------------

    def join(self) -> None:
        if self._lock_file is not None:
            return
        # Lock under a temporary name, then rename: nobody can see the lock file unlocked
        # (and take us for dead) between its creation and the lock.
        tmp = self.layout.member_joining(self.member_id, os.getpid())
        f = open(tmp, "w")  # noqa: SIM115 (held for the member's lifetime)
        fcntl.flock(f, fcntl.LOCK_EX)
        self._lock_file = f
        self.heartbeat()
        os.replace(tmp, self.layout.member_lock(self.member_id))
        self.bump()

    def idle(self, timeout: float, stop: threading.Event) -> None:
        """Files push nothing: sleep on ``stop`` (the generation is read on the next turn)."""
        stop.wait(timeout)

    def heartbeat(self) -> None:
        info = {"pid": os.getpid(), "started": self.started, "heartbeat": time.time()}
        _write_atomic(self.layout.member_info(self.member_id), json.dumps(info))

    def leave(self) -> None:
        """Release every task, leave the group and tell the others."""
        for task in list(self._task_locks):
            self.release_task(task)
        if self._lock_file is None:
            return
        self._remove_member(self.member_id)
        self._lock_file.close()
        self._lock_file = None
        self.bump()

    # -- others --------------------------------------------------------------------------

    def members(self) -> list[str]:
        """Live members, sorted. Removes dead ones (and bumps the generation if any)."""
        alive, dead = [], []
        for member in self.layout.listed_members():
            if member == self.member_id and self._lock_file is not None:
                alive.append(member)
                continue
            try:
                with open(self.layout.member_lock(member)) as f:
                    if _try_lock(f, shared=True):
                        dead.append(member)  # nobody holds it: its process is gone
                        continue
            except FileNotFoundError:
                continue  # left meanwhile
            if self._stale(member):
                continue  # hung: not counted, but its lock still holds its tasks
            alive.append(member)
        for member in dead:
            self._remove_member(member)
        if dead:
            self.bump()
        return sorted(alive)

    def _remove_member(self, member: str) -> None:
        for path in (self.layout.member_lock(member), self.layout.member_info(member)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _stale(self, member: str) -> bool:
        try:
            info = json.loads(self.layout.member_info(member).read_text())
        except (FileNotFoundError, ValueError):
            return False  # being written; the lock says it is alive
        return bool(time.time() - info.get("heartbeat", 0) > self.session_timeout)

    def describe(self) -> dict[str, dict[str, object]]:
        """Members with pid and heartbeat age, plus the tasks each holds."""
        out: dict[str, dict[str, object]] = {}
        for member in self.members():
            try:
                info = json.loads(self.layout.member_info(member).read_text())
            except (FileNotFoundError, ValueError):
                info = {}
            out[member] = {
                "pid": info.get("pid"),
                "heartbeat_age_s": round(time.time() - info.get("heartbeat", time.time()), 3),
            }
        return out

    # -- task ownership ------------------------------------------------------------------

    def acquire_task(self, task: str) -> bool:
        """Take the lock of ``task``; False while another member still holds it."""
        if task in self._task_locks:
            return True
        f = open(self.layout.task_lock(task), "a")  # noqa: SIM115 (held while owned)
        if not _try_lock(f):
            f.close()
            return False
        f.truncate(0)  # for tools: who holds it
        f.write(self.member_id)
        f.flush()
        self._task_locks[task] = f
        return True

    def release_task(self, task: str) -> None:
        f = self._task_locks.pop(task, None)
        if f is not None:
            f.close()

    def task_owners(self) -> dict[str, str]:
        """Task -> member currently holding its lock (free tasks are left out)."""
        owners = {}
        for task in self.layout.listed_tasks():
            try:
                with open(self.layout.task_lock(task)) as f:
                    if _try_lock(f, shared=True):
                        continue  # nobody holds it
                    owners[task] = f.read().strip() or "?"
            except FileNotFoundError:
                continue
        return owners

    @property
    def held_tasks(self) -> list[str]:
        return sorted(self._task_locks)

    def lost_tasks(self) -> list[str]:
        """Always empty: a task lock is held for as long as the process lives."""
        return []
