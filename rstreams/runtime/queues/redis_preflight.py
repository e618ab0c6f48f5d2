"""Before a run over Redis starts: can the broker's user do what the runtime does?

An ACL user without a command, a key pattern or a pub/sub channel the runtime needs
would otherwise start workers that fail at their first heartbeat or commit, again and
again. ``ACL DRYRUN`` needs admin rights a job's user rarely has, so the check sends
every command the runtime sends (:data:`COMMANDS`: from Python, and from its Lua
scripts, whose ``redis.call`` runs with the user's ACL), as that user, on probe keys
under the job's hash tag (deleted after) and on the job's channels. Redis checks the
ACL before it runs a command, so arguments that fail after the check (no such key, a
wrong type, ``EXEC without MULTI``) are enough and write nothing. Each refusal names
the command, key or channel, and together they are one line (a
:class:`RedisPermissionError`: exit 2). ``tests/unit/test_redis_commands.py`` checks
that :data:`COMMANDS` is every command the code sends.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING, Any

from rstreams.runtime.queues.redisstreams import RedisConfigError
from rstreams.runtime.rebalance.redis_membership import job_prefix

if TYPE_CHECKING:
    import redis

    from rstreams.runtime.queues.redisstreams import RedisTarget

__all__ = ["COMMANDS", "RedisPermissionError", "check_permissions"]


class RedisPermissionError(RedisConfigError):
    """The Redis user lacks a command, key or channel the runtime needs."""


def _probes(key: str, key2: str, channel: str, pattern: str) -> dict[str, tuple[str, ...]]:
    """Each command the runtime sends (named as ACL rules name it: ``xgroup|create``)
    with arguments that reach its ACL check: ``key`` holds a string (with an expiry)
    once ``set`` ran, so most writes after it fail on its type, after the check."""
    return {
        "ping": ("PING",),
        "info": ("INFO", "server"),
        "exists": ("EXISTS", key),
        "get": ("GET", key),
        "mget": ("MGET", key),
        "pttl": ("PTTL", key),
        "scan": ("SCAN", "0", "MATCH", f"{key}*", "COUNT", "10"),
        "set": ("SET", key, "1", "PX", "60000"),
        "incr": ("INCR", key),
        "pexpire": ("PEXPIRE", key, "60000"),
        "hset": ("HSET", key, "p", "1"),
        "hsetnx": ("HSETNX", key, "p", "1"),
        "hget": ("HGET", key, "p"),
        "hgetall": ("HGETALL", key),
        "hdel": ("HDEL", key, "p"),
        "sadd": ("SADD", key, "p"),
        "srem": ("SREM", key, "p"),
        "smembers": ("SMEMBERS", key),
        "sismember": ("SISMEMBER", key, "p"),
        "xadd": ("XADD", key, "0-1", "p", "1"),
        "xrange": ("XRANGE", key, "-", "+", "COUNT", "1"),
        "xread": ("XREAD", "COUNT", "1", "STREAMS", key, "0-0"),
        "xtrim": ("XTRIM", key, "MAXLEN", "0"),
        "xsetid": ("XSETID", key, "0-1"),
        "xinfo|stream": ("XINFO", "STREAM", key),
        "xgroup|create": ("XGROUP", "CREATE", key, "rstreams-preflight", "$"),
        "xgroup|destroy": ("XGROUP", "DESTROY", key, "rstreams-preflight"),
        "rename": ("RENAME", key, key2),
        "del": ("DEL", key, key2),
        "watch": ("WATCH", key),
        "unwatch": ("UNWATCH",),
        "multi": ("MULTI",),
        "exec": ("EXEC",),
        "script|load": ("SCRIPT", "LOAD", "return 1"),
        "evalsha": ("EVALSHA", "0" * 40, "1", key),
        "publish": ("PUBLISH", channel, ""),
        "subscribe": ("SUBSCRIBE", channel),
        "psubscribe": ("PSUBSCRIBE", pattern),
    }


#: Every command the runtime sends to Redis, as ACL rules name them.
COMMANDS = frozenset(_probes("k", "k2", "c", "p"))

#: Commands after which the probe connection is in a state (a transaction, watched
#: keys, subscriptions): it is closed, and the next probe opens it again.
_STATEFUL = frozenset({"watch", "multi", "subscribe", "psubscribe"})


def _refusal(error: Exception, command: str, keys: str, channel: str) -> str | None:
    """What a reply to ``command`` says is missing (the command, the keys or the
    channel), or None if it is no refusal (an error after the ACL check)."""
    text = str(error)
    if "unknown command" in text:  # (renamed or disabled in the server's configuration)
        return f"the command {command!r} (unknown to this server)"
    if "NOPERM" not in text and "no permissions" not in text:
        return None
    if "key" in text:
        return f"the keys {keys} (key pattern ~{keys})"
    if "channel" in text:
        return channel
    return f"the command {command!r}"


def check_permissions(client: redis.Redis, target: RedisTarget, job: str) -> None:
    """Raise :class:`RedisPermissionError` naming every permission the run of ``job``
    needs that the user of ``target`` lacks; nothing if it has them all."""
    import redis.exceptions as rx

    prefix = job_prefix(job)
    key = f"{prefix}:preflight:{uuid.uuid4().hex[:12]}"
    channel = f"{prefix}:{job}:changes"
    # (as RedisGroupMembership subscribes: its members' keys expiring)
    pattern = f"__keyspace@{target.db}__:{prefix}:{job}:member:*"
    channels = {
        "psubscribe": f"the keyspace notification pattern {pattern} (channel pattern &{pattern})",
    }
    missing: list[str] = []
    pool = client.connection_pool
    conn: Any = pool.get_connection()
    try:
        for command, args in _probes(key, f"{key}:2", channel, pattern).items():
            try:
                conn.send_command(*args)
                # (a subscription's reply is a push message under RESP3)
                conn.read_response(push_request=command.endswith("subscribe"))
            except rx.OutOfMemoryError:
                raise  # (no refusal: the run can not write at all; said as such)
            except rx.ResponseError as e:
                what = channels.get(command, f"the channel {channel} (channel pattern &{channel})")
                lacking = _refusal(e, command, f"{prefix}:*", what)
                if lacking is not None and lacking not in missing:
                    missing.append(lacking)
            if command in _STATEFUL:
                conn.disconnect()
    finally:
        conn.disconnect()  # (no transaction, watch or subscription left on a pooled one)
        pool.release(conn)
        with contextlib.suppress(rx.RedisError):  # (refused too: nothing written under it)
            client.delete(key, f"{key}:2")
    if missing:
        user = target.username or "default"
        raise RedisPermissionError(
            f"the Redis user {user!r} at {target.address} lacks what job {job!r} needs: "
            f"{'; '.join(missing)}. Grant them, e.g. `ACL SETUSER {user} ~{prefix}:* "
            f"&{prefix}:* &{pattern} +@read +@write +@stream +@hash +@string +@set "
            "+@keyspace +@scripting +@pubsub +@transaction +@connection -@dangerous +info` "
            "(docs/redis.md#security)"
        )
