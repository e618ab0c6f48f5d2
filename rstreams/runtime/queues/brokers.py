"""One dispatch: a run's broker, group membership, job lock and end-of-input flags.

Without ``--broker`` everything of a job is files under its data directory: the file
log, :class:`~rstreams.runtime.rebalance.membership.FileGroupMembership`, the
``flock`` :class:`~rstreams.runtime.queues.joblock.JobLock` and end-of-input files.
With ``--broker redis://...`` the job's topics, offsets, group, lock and end-of-input
flags live in Redis, so workers on several hosts (``rstreams run --join``) run one job;
each host keeps its local state stores (RocksDB), its worker logs and statistics under
its own data directory, and a task that moves restores from its changelog (a topic in
the broker).

Every process opens what it needs here, from the run's :class:`~rstreams.config.RunConfig`
(a worker gets it in its launch, on standard input: never a password in its argv).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rstreams.config import RunConfig
from rstreams.runtime.layout import GroupLayout, JobLayout
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.queues.eoiflags import EoiFlags, FileEoiFlags, RedisEoiFlags
from rstreams.runtime.queues.joblock import JobLock
from rstreams.runtime.rebalance.group import GroupMembership

if TYPE_CHECKING:
    import redis

    from rstreams.runtime.queues.redisstreams import RedisTarget


log = logging.getLogger("rstreams.supervisor")


def on_redis(config: RunConfig | None) -> bool:
    """Does a run with ``config`` keep its job in Redis?"""
    return config is not None and config.broker is not None


def broker_target(config: RunConfig) -> RedisTarget:
    """The Redis server ``config.broker`` and the ``--broker-*`` options name."""
    from rstreams.runtime.queues.redisstreams import RedisTarget

    assert config.broker is not None
    return RedisTarget.parse(
        config.broker,
        config.broker_password_file,
        tls_ca=config.broker_tls_ca,
        tls_cert=config.broker_tls_cert,
        tls_key=config.broker_tls_key,
    )


#: For how long this process waits for a Redis that does not answer (or still loads its
#: data) when it connects: 0 for ``rstreams run`` itself (a wrong port is one line at
#: once), :data:`WORKER_PATIENCE` in a worker (restarted while Redis restarts).
_patience = [0.0]

#: A worker waits this long for Redis at its start (the supervisor rides out as long).
WORKER_PATIENCE = 120.0


def set_connect_patience(seconds: float) -> None:
    """Make this process wait up to ``seconds`` for Redis when it connects."""
    _patience[0] = seconds


def _connect(target: RedisTarget) -> redis.Redis:
    from rstreams.runtime.queues.redisstreams import connect

    return connect(target, patience=_patience[0])


@functools.lru_cache(maxsize=8)
def _client(target_json: str) -> redis.Redis:
    from rstreams.runtime.queues.redisstreams import RedisTarget

    return _connect(RedisTarget.from_json(target_json))


def redis_client(config: RunConfig) -> redis.Redis:
    """This process's client of the run's Redis (one per server: membership, the job
    lock and end-of-input flags share it; the broker has its own)."""
    return _client(broker_target(config).to_json())


def open_broker(
    root: str | os.PathLike[str], config: RunConfig | None = None, **kwargs: Any
) -> Broker:
    """The broker of the job whose directory is ``root``: the file log under it, or, with
    ``config.broker``, the job's streams in Redis (``kwargs`` go to the file log)."""
    if not on_redis(config):
        from rstreams.runtime.queues.filelog import FileBroker

        return FileBroker(JobLayout.at(root).log, **kwargs)
    assert config is not None
    return open_redis_broker(broker_target(config), Path(root).name)


def open_redis_broker(target: RedisTarget, job: str, patience: float | None = None) -> Broker:
    """Job ``job``'s streams on ``target`` (the broker owns its client): what
    :func:`open_broker` and the admin commands open. ``patience``: for how long to wait
    for a server that does not answer (default: this process's, see
    :func:`set_connect_patience`)."""
    from rstreams.runtime.queues.redisstreams import RedisBroker, connect

    wait = _patience[0] if patience is None else patience
    broker: Broker = RedisBroker(connect(target, patience=wait), job)
    return broker


def open_membership(
    root: str | os.PathLike[str],
    group: str,
    member: str,
    session_timeout: float,
    config: RunConfig | None = None,
) -> GroupMembership:
    """Member ``member`` of consumer group ``group`` of the job in ``root``: in files, or
    in Redis (then its changes are pushed: ``wait_for_change``)."""
    if not on_redis(config):
        from rstreams.runtime.rebalance.membership import FileGroupMembership

        return FileGroupMembership(root, group, member, session_timeout)
    from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership

    assert config is not None
    job = Path(root).name
    return RedisGroupMembership(
        redis_client(config), job, group, member, session_timeout=session_timeout
    )


def check_broker_permissions(config: RunConfig, job: str) -> None:
    """On Redis, refuse at once (one line, exit 2) a user that lacks a command, key or
    channel the run of ``job`` needs, rather than start workers that fail at their
    first commit; on the file log, nothing."""
    if on_redis(config):
        from rstreams.runtime.queues.redis_preflight import check_permissions

        check_permissions(redis_client(config), broker_target(config), job)


def open_job_lock(data_dir: str | os.PathLike[str], job: str, config: RunConfig) -> Any:
    """The lock that lets one run own job ``job`` at a time: a file lock in ``data_dir``,
    or, with a broker, a lock in Redis (over every host), not yet taken."""
    if not on_redis(config):
        return JobLock(data_dir, job)
    from rstreams.runtime.queues.redis_joblock import RedisJobLock

    return RedisJobLock(redis_client(config), job)


def open_eoi_flags(group: GroupLayout, job: str, config: RunConfig | None) -> EoiFlags:
    """Where the end of input of a bounded run is declared and answered."""
    if not on_redis(config):
        return FileEoiFlags(group)
    assert config is not None
    return RedisEoiFlags(redis_client(config), job)


def drop_job(config: RunConfig, job: str) -> int:
    """Delete what job ``job`` keeps in the broker (``--fresh``): its streams, offsets,
    group and flags, all under its hash tag; not its job lock (held by the caller) nor
    the lock's generation (which fences the caller's writes). Returns the keys deleted."""
    from rstreams.runtime.queues.redis_joblock import lock_keys

    client = redis_client(config)
    kept = set(lock_keys(job))
    keys = list(client.scan_iter(match=f"rs:{{{job}}}:*", count=1000))
    keys = [k for k in keys if (k.decode() if isinstance(k, bytes) else k) not in kept]
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])
    return len(keys)


def broker_identity(config: RunConfig | None) -> str:
    """What holds a run's topics, without secrets: ``file log``, or the Redis server and
    database (``redis://127.0.0.1:6379/0``)."""
    if not on_redis(config):
        return "file log"
    assert config is not None
    target = broker_target(config)
    return f"{'rediss' if target.tls else 'redis'}://{target.address}/{target.db}"


def claim_local_state(layout: JobLayout, config: RunConfig | None) -> None:
    """Keep the job's local state stores only if they were built from this broker.

    Local stores are copies of changelogs in the broker. Copies built from another
    broker (a job first run on the file log, then with ``--broker``) are ahead of this
    broker's changelogs, which a restore would rightly call lost data: they are deleted
    here, to be restored from this broker. The broker is recorded in ``<job>/broker``.
    """
    marker = layout.root / "broker"
    identity = broker_identity(config)
    # (a job directory from before the marker existed was always on the file log)
    before = marker.read_text().strip() if marker.exists() else "file log"
    if before != identity and layout.state.exists():
        log.warning(
            "the local state under %s was built from %s, not %s: deleting it; each task "
            "restores its state from %s's changelogs",
            layout.state, before, identity, identity,
        )  # fmt: skip
        shutil.rmtree(layout.state)
    if before != identity or not marker.exists():
        tmp = marker.with_name(".broker.tmp")
        tmp.write_text(identity + "\n")
        os.replace(tmp, marker)
