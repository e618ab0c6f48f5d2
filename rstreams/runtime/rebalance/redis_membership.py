"""Group membership over Redis: members on any host, leases, fencing, pushed changes.

The same semantics as :class:`~rstreams.runtime.rebalance.membership.FileGroupMembership`
(the :class:`~rstreams.runtime.rebalance.group.GroupMembership` protocol), for workers
that share no file system. Keys, all under the job's hash tag so one script or
transaction can touch them together (and so all sit in one slot of a Redis Cluster)::

    rs:{<job>}:<group>:gen              the generation (INCR on every change)
    rs:{<job>}:<group>:members          set of member ids believed alive
    rs:{<job>}:<group>:member:<id>      member <id>'s lease: JSON (host, pid, ...), PX timeout
    rs:{<job>}:<group>:tasks            set of task names ever taken (for task_owners)
    rs:{<job>}:<group>:task:<task>      "<member>#<token>" of the task's owner, PX timeout
    rs:{<job>}:<group>:fence            the fencing counter (INCR per acquisition)
    rs:{<job>}:<group>:changes          pub/sub channel: "<generation> <reason> <member>"

(the Redis broker's keys are ``rs:{<job>}:q:...``, ``:topics`` and ``:offsets:<group>``).

A member is alive while its lease key exists: ``heartbeat`` renews it and the leases of
its tasks (PX = the session timeout). Every change (join, leave, a dead member noticed,
``bump``) increments the generation and is published on the group's channel, in the same
script, so :meth:`RedisGroupMembership.wait_for_change` returns at once and the member
rebalances — the "broker notifies the client" of RocketMQ.

A member that dies (``kill -9``, a lost host) is noticed when its lease expires: every
member's ``members()`` (which a worker calls on each heartbeat) compares the member set
with the live leases, and whoever first removes a dead id from the set bumps and publishes.
This works on any Redis (managed ones often refuse ``CONFIG SET notify-keyspace-events``).
When the server already sends keyspace notifications for expired keys (``Kx`` or
``KEA``), ``wait_for_change`` listens to them as well and notices the expiry on the spot.

Fencing: each acquisition of a task stores a fresh token from the fencing counter.
:meth:`RedisGroupMembership.task_fence` gives ``(key, value)`` for the broker's
``transaction(fence=...)``, which applies nothing unless the key still holds the value:
a member whose lease ran out (a long pause) and whose task another member took can no
longer commit for it, and finds out on its next heartbeat (:meth:`lost_tasks`). Unlike
files, where a hung process keeps its task locks, a member that stops heartbeating loses
its tasks with its lease.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from rstreams.runtime.rebalance.membership import SESSION_TIMEOUT

if TYPE_CHECKING:
    import redis
    from redis.client import PubSub


def _notify(gen_key: int, result: str = "gen") -> str:
    """Lua: bump the generation (KEYS[gen_key]), publish "<gen> <reason> <member>" on the
    channel ARGV[4] (reason ARGV[5], member ARGV[1]) and return ``result``."""
    return (
        f"local gen = redis.call('INCR', KEYS[{gen_key}]) "
        "redis.call('PUBLISH', ARGV[4], gen .. ' ' .. ARGV[5] .. ' ' .. ARGV[1]) "
        f"return {result}"
    )


_NOTIFY = _notify(3)

# KEYS: lease, members, gen; ARGV: member, info, ttl_ms, channel, reason
_JOIN = f"""
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
{_NOTIFY}
"""

# Remove a member (ARGV[2] == '1': its own leave, else only if its lease is gone); bumps
# only for whoever takes it out of the set, so a death is announced once.
# KEYS: lease, members, gen; ARGV: member, force, -, channel, reason
_REMOVE = f"""
if ARGV[2] == '1' then redis.call('DEL', KEYS[1])
elseif redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('SREM', KEYS[2], ARGV[1]) == 0 then return 0 end
{_NOTIFY}
"""

# KEYS: gen; ARGV: member, -, -, channel, reason
_BUMP = _notify(1)

# Renew the member's lease (joining again if it ran out) and the leases of its tasks
# that are still its own; returns the 1-based indexes of the tasks it lost.
# KEYS: lease, members, gen, task keys...; ARGV: member, info, ttl_ms, channel, reason,
# task values...
_HEARTBEAT = f"""
local lost = {{}}
for i = 4, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 2] then redis.call('PEXPIRE', KEYS[i], ARGV[3])
  else table.insert(lost, i - 3) end
end
if redis.call('PEXPIRE', KEYS[1], ARGV[3]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('SADD', KEYS[2], ARGV[1])
  {_notify(3, "lost")}
end
return lost
"""

# KEYS: task key, fence counter, tasks set; ARGV: member, ttl_ms, task
_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local value = ARGV[1] .. '#' .. redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
redis.call('SADD', KEYS[3], ARGV[3])
return value
"""

#: Delete KEYS[1] only if it still holds ARGV[1] (a lease or lock given back by its owner).
DELETE_IF_HELD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

#: Seconds between reads of the generation by a waiter that got no message.
RECHECK_S = 1.0


def job_prefix(job: str) -> str:
    """``rs:{<job>}``: the start of every key of ``job`` (its hash tag)."""
    if not job or "{" in job or "}" in job:
        raise ValueError(f"a job id for Redis must be non-empty without braces; got {job!r}")
    return f"rs:{{{job}}}"


def text(value: Any) -> str:
    """A reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _glob_escape(s: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in s)


class RedisGroupMembership:
    """One member's view of a consumer group kept in Redis.

    ``client``: a ``redis.Redis``; ``job``: the job id (the keys' hash tag); ``group``:
    the consumer group (the job id for a job's workers); ``member``: this member's id.
    One thread uses an instance (its subscription is not shared). Pub/sub channels are
    server-wide, not per database: a job of the same name in another database of the
    server only wakes waiters for nothing (they compare generations before saying yes).
    """

    #: Every commit checks the task's key still holds this member's token.
    fences_commits = True

    def __init__(
        self,
        client: redis.Redis,
        job: str,
        group: str,
        member: str,
        *,
        session_timeout: float = SESSION_TIMEOUT,
    ) -> None:
        self.client = client
        self.job = job
        self.group = group
        self.member_id = member
        self.session_timeout = session_timeout
        self.ttl_ms = max(1, int(session_timeout * 1000))
        self.prefix = f"{job_prefix(job)}:{group}"
        self.channel = f"{self.prefix}:changes"
        self.started = time.time()
        self._joined = False
        #: task -> the value its key holds while it is ours
        self._tasks: dict[str, str] = {}
        #: tasks lost without a release -> the value they held (their fence)
        self._lost: dict[str, str] = {}
        self._seen = -1
        self._sub: PubSub | None = None
        #: whether a message came since the generation was last read; when to read anyway
        self._stale, self._recheck = True, 0.0
        scripts = {"join": _JOIN, "remove": _REMOVE, "bump": _BUMP, "heartbeat": _HEARTBEAT}
        scripts |= {"acquire": _ACQUIRE, "release": DELETE_IF_HELD}
        self._scripts = {name: client.register_script(src) for name, src in scripts.items()}

    # -- keys ----------------------------------------------------------------------------

    def key(self, *parts: str) -> str:
        return ":".join([self.prefix, *parts])

    def _member_keys(self, member: str) -> list[str]:
        return [self.key("member", member), self.key("members"), self.key("gen")]

    def _info(self) -> str:
        host = socket.gethostname()
        return json.dumps(
            {"host": host, "pid": os.getpid(), "started": self.started, "ttl_ms": self.ttl_ms}
        )

    def _args(self, member: str, reason: str, second: str = "-") -> list[str | int]:
        return [member, second, self.ttl_ms, self.channel, reason]

    # -- generation ----------------------------------------------------------------------

    def generation(self) -> int:
        gen = self._read_generation()
        self._seen = gen
        return gen

    def _read_generation(self) -> int:
        value = self.client.get(self.key("gen"))
        return int(text(value)) if value is not None else 0

    def bump(self) -> int:
        """Increment the generation and publish it (tells every member to rebalance)."""
        gen = self._scripts["bump"](keys=[self.key("gen")], args=self._args(self.member_id, "bump"))
        return int(gen)

    # -- own membership ------------------------------------------------------------------

    def join(self) -> None:
        if self._joined:
            return
        self._subscribe()  # before the generation moves: no change goes unseen
        self._scripts["join"](
            keys=self._member_keys(self.member_id),
            args=self._args(self.member_id, "join", self._info()),
        )
        self._joined = True

    def heartbeat(self) -> None:
        """Renew this member's lease and its tasks' leases (nothing before :meth:`join`).

        A task whose key no longer holds this member's token is moved to
        :meth:`lost_tasks`, even if its key merely expired and nobody holds it now:
        another member may have taken it, committed and released it meanwhile, so the
        state this member has of it may be stale. A member whose own lease ran out (a
        long pause) joins again, which bumps the generation."""
        if not self._joined:
            return
        names = sorted(self._tasks)
        lost = self._scripts["heartbeat"](
            keys=self._member_keys(self.member_id) + [self.key("task", t) for t in names],
            args=[
                *self._args(self.member_id, "rejoin", self._info()),
                *(self._tasks[t] for t in names),
            ],
        )
        for index in lost:
            self._lose(names[int(index) - 1])

    def _lose(self, task: str) -> None:
        self._lost[task] = self._tasks.pop(task)

    def leave(self) -> None:
        """Release every task, leave the group and tell the others."""
        for task in list(self._tasks):
            self.release_task(task)
        self._lost.clear()
        if self._joined:
            self._joined = False
            self._scripts["remove"](
                keys=self._member_keys(self.member_id),
                args=self._args(self.member_id, "leave", "1"),
            )
        if self._sub is not None:
            sub, self._sub = self._sub, None
            sub.close()

    # -- others --------------------------------------------------------------------------

    def _leases(self) -> dict[str, tuple[Any, int]]:
        """Every member in the set -> (its lease value or None, its lease's PTTL)."""
        members = sorted(text(m) for m in self.client.smembers(self.key("members")))
        pipe = self.client.pipeline(transaction=False)
        for member in members:
            pipe.get(self.key("member", member))
            pipe.pttl(self.key("member", member))
        replies = pipe.execute()
        return {m: (replies[2 * i], int(replies[2 * i + 1])) for i, m in enumerate(members)}

    def members(self) -> list[str]:
        """Live members, sorted. Takes members whose lease expired out of the group (the
        first member to see one gone bumps the generation and tells the others)."""
        alive = []
        for member, (lease, _) in self._leases().items():
            if lease is not None:
                alive.append(member)
            else:
                self._scripts["remove"](
                    keys=self._member_keys(member), args=self._args(member, "expired", "0")
                )
        return alive

    def describe(self) -> dict[str, dict[str, object]]:
        """Members with host, pid and heartbeat age (from the lease's remaining time,
        on the server's clock: hosts' clocks need not agree)."""
        out: dict[str, dict[str, object]] = {}
        self.members()  # (drops the dead first)
        for member, (lease, pttl) in self._leases().items():
            if lease is None:
                continue
            try:
                info = json.loads(text(lease))
            except ValueError:
                info = {}
            ttl_ms = int(info.get("ttl_ms", self.ttl_ms))
            out[member] = {
                "host": info.get("host"),
                "pid": info.get("pid"),
                "heartbeat_age_s": round(max(0, ttl_ms - max(pttl, 0)) / 1000, 3),
            }
        return out

    # -- task ownership ------------------------------------------------------------------

    def acquire_task(self, task: str) -> bool:
        """Take ``task`` with a fresh fencing token; False while another member holds it.

        For a task already held, the lease is checked: if another member took it
        meanwhile, it moves to :meth:`lost_tasks` and this returns False."""
        key = self.key("task", task)
        if task in self._tasks:
            current = self.client.get(key)
            if current is not None and text(current) == self._tasks[task]:
                return True
            self._lose(task)
            return False
        value = self._scripts["acquire"](
            keys=[key, self.key("fence"), self.key("tasks")],
            args=[self.member_id, self.ttl_ms, task],
        )
        if value is None:
            return False
        self._lost.pop(task, None)
        self._tasks[task] = text(value)
        return True

    def release_task(self, task: str) -> None:
        """Give ``task`` up: its key is deleted only if it is still ours. A lost task is
        forgotten (its new owner keeps it)."""
        value = self._tasks.pop(task, None)
        self._lost.pop(task, None)
        if value is not None:
            self._scripts["release"](keys=[self.key("task", task)], args=[value])

    def task_owners(self) -> dict[str, str]:
        """Task -> member currently holding its lease (free tasks are left out)."""
        tasks = sorted(text(t) for t in self.client.smembers(self.key("tasks")))
        values = self.client.mget([self.key("task", t) for t in tasks]) if tasks else []
        return {t: text(v).rpartition("#")[0] for t, v in zip(tasks, values) if v is not None}

    @property
    def held_tasks(self) -> list[str]:
        return sorted(self._tasks)

    def lost_tasks(self) -> list[str]:
        """Tasks this member held and lost (their lease ran out and another member took
        them): stop them without committing (a commit would be refused by the fence),
        then :meth:`release_task` them."""
        return sorted(self._lost)

    def task_fence(self, task: str) -> tuple[str, str]:
        """``(key, value)`` for the broker's ``transaction(fence=...)``: the commit of
        ``task`` applies only while its key still holds this member's token. Also given
        for a lost task (its commits are then refused). KeyError if never acquired."""
        value = self._tasks.get(task) or self._lost.get(task)
        if value is None:
            raise KeyError(f"task {task!r} is not held by member {self.member_id!r}")
        return self.key("task", task), value

    # -- change notification -------------------------------------------------------------

    def _subscribe(self) -> PubSub:
        if self._sub is None:
            sub = self.client.pubsub(ignore_subscribe_messages=True)
            sub.subscribe(self.channel)
            # Dead members' leases expiring, if the server sends keyspace events (it is
            # not configured here: a shared or managed server may refuse or mind it).
            db = self.client.connection_pool.connection_kwargs.get("db", 0)
            sub.psubscribe(f"__keyspace@{db}__:{_glob_escape(self.key('member', ''))}*")
            self._sub = sub
            self._stale = True  # (changes before the subscription were not pushed)
        return self._sub

    def idle(self, timeout: float, stop: threading.Event) -> None:
        """Wait for a pushed change of the group, up to ``timeout`` (short: a worker's
        idle turn; ``stop`` is seen on the next turn)."""
        self.wait_for_change(timeout)

    def wait_for_change(self, timeout: float) -> bool:
        """True as soon as the generation moved since this member last read it (by
        :meth:`generation` or here); False after ``timeout`` seconds without a change.

        Changes are pushed over pub/sub: this returns within a round trip of the change,
        and reads the generation from Redis only when a message came (or every
        ``RECHECK_S`` seconds, in case the subscription missed one while reconnecting),
        so calling it with timeout 0 on every turn of a loop costs no round trip. A
        Redis error is raised; the next call subscribes again."""
        deadline = time.monotonic() + timeout
        sub = self._subscribe()
        try:
            while True:
                wait = max(0.0, min(deadline, self._recheck) - time.monotonic())
                message = sub.get_message(timeout=wait)
                if message is not None:
                    self._stale = True
                    if message["type"] == "pmessage" and text(message["data"]) == "expired":
                        self.members()  # takes the dead one out and bumps
                if self._stale or time.monotonic() >= self._recheck:
                    self._stale, self._recheck = False, time.monotonic() + RECHECK_S
                    gen = self._read_generation()
                    if gen != self._seen:
                        self._seen = gen
                        return True
                if time.monotonic() >= deadline:
                    return False
        except Exception:
            self._sub = None
            sub.close()
            raise
