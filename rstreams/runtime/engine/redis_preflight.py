"""Before a run over Redis starts: can the broker's user do what the runtime does?

An ACL user without a command, a key pattern or a pub/sub channel the runtime needs
would otherwise start workers that fail at their first heartbeat or commit, again and
again. ``ACL DRYRUN`` needs admin rights a job's user rarely has, so the check runs the
commands themselves, as that user, on a probe key under the job's hash tag (deleted
after) and on the job's channels: each refusal names the command, key or channel, and
together they are one line (a :class:`RedisPermissionError`: exit 2).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rstreams.runtime.queues.redisstreams import RedisConfigError
from rstreams.runtime.rebalance.redis_membership import job_prefix

if TYPE_CHECKING:
    import redis

    from rstreams.runtime.queues.redisstreams import RedisTarget

__all__ = ["RedisPermissionError", "check_permissions"]

#: A script as the runtime's are (EVALSHA of a registered script, keys under the tag,
#: PUBLISH of a change inside it).
_SCRIPT = "redis.call('SET', KEYS[1], '1', 'PX', 10000) return redis.call('PUBLISH', ARGV[1], '')"


class RedisPermissionError(RedisConfigError):
    """The Redis user lacks a command, key or channel the runtime needs."""


def _probes(key: str, channel: str, pattern: str) -> list[tuple[str, Callable[[redis.Redis], Any]]]:
    """(what is needed, a call that needs it), in the order the runtime first needs them."""
    return [
        ("the command 'exists'", lambda c: c.exists(key)),
        ("the command 'xadd'", lambda c: c.xadd(key, {"p": "1"}, id="0-1")),
        ("the command 'xrange'", lambda c: c.xrange(key, count=1)),
        ("the command 'xread'", lambda c: c.xread({key: "0-0"}, count=1)),
        ("the command 'xdel'", lambda c: c.xdel(key, "0-1")),
        ("the command 'del'", lambda c: c.delete(key)),
        ("the command 'hset'", lambda c: c.hset(key, "p", "1")),
        ("the command 'hgetall'", lambda c: c.hgetall(key)),
        ("the command 'hget'", lambda c: c.hget(key, "p")),
        ("the command 'sadd'", lambda c: c.delete(key) + c.sadd(key, "p")),
        ("the command 'smembers'", lambda c: c.smembers(key)),
        ("the command 'set'", lambda c: c.delete(key) + bool(c.set(key, "1", px=10000))),
        ("the command 'get'", lambda c: c.get(key)),
        ("the command 'mget'", lambda c: c.mget([key])),
        ("the command 'pttl'", lambda c: c.pttl(key)),
        ("the command 'scan'", lambda c: c.scan(0, match=f"{key}*", count=10)),
        ("transactions (watch, multi, exec)", lambda c: _transaction(c, key)),
        (f"the channel {channel} (channel pattern &{channel})", lambda c: c.publish(channel, "")),
        ("scripts (evalsha, eval)", lambda c: c.register_script(_SCRIPT)([key], [channel])),
        ("the command 'subscribe'", lambda c: _subscribe(c, "subscribe", channel)),
        (
            f"the keyspace notification pattern {pattern} (channel pattern &{pattern})",
            lambda c: _subscribe(c, "psubscribe", pattern),
        ),
    ]


def _transaction(client: redis.Redis, key: str) -> None:
    with client.pipeline(transaction=True) as pipe:
        pipe.watch(key)
        pipe.multi()
        pipe.get(key)
        pipe.execute()


def _subscribe(client: redis.Redis, how: str, channel: str) -> None:
    sub = client.pubsub()
    try:
        getattr(sub, how)(channel)
        sub.get_message(timeout=1.0)  # (the reply: an error if refused)
    finally:
        sub.close()


def _refusal(error: Exception, what: str, key: str, channel: str) -> str | None:
    """What a refusal says is missing (its command, the key or the channel), or None if
    ``error`` is no refusal."""
    text = str(error)
    if "NOPERM" not in text and "no permissions" not in text and "can't" not in text:
        return None
    if "command" in text and "'" in text and "script" not in text:
        return f"the command {text.split(chr(39))[1]!r}"
    if "key" in text:
        return f"the keys {key.rsplit(':', 2)[0]}:* (key pattern ~{key.rsplit(':', 2)[0]}:*)"
    if "channel" in text:
        return what if "pattern" in what else f"the channel {channel} (channel pattern &{channel})"
    return what


def check_permissions(client: redis.Redis, target: RedisTarget, job: str) -> None:
    """Raise :class:`RedisPermissionError` naming every permission the run of ``job``
    needs that the user of ``target`` lacks; nothing if it has them all."""
    import redis.exceptions as rx

    prefix = job_prefix(job)
    key = f"{prefix}:preflight:{uuid.uuid4().hex[:12]}"
    missing: list[str] = []
    try:
        channel = f"{prefix}:{job}:changes"
        # (as RedisGroupMembership subscribes: its members' keys expiring)
        pattern = f"__keyspace@{target.db}__:{prefix}:{job}:member:*"
        for what, probe in _probes(key, channel, pattern):
            try:
                probe(client)
            except (rx.NoPermissionError, rx.ResponseError) as e:
                lacking = _refusal(e, what, key, channel)
                if lacking is None:
                    raise
                if lacking not in missing:
                    missing.append(lacking)
    finally:
        with contextlib.suppress(rx.RedisError):  # (refused too: nothing written under it)
            client.delete(key)
    if missing:
        user = target.username or "default"
        raise RedisPermissionError(
            f"the Redis user {user!r} at {target.address} lacks what job {job!r} needs: "
            f"{'; '.join(missing)}. Grant them, e.g. `ACL SETUSER {user} ~{prefix}:* "
            f"&{prefix}:* &{pattern} +@read +@write +@stream +@hash +@string +@set "
            "+@keyspace +@scripting +@pubsub +@transaction +info` (docs/redis.md#security)"
        )
