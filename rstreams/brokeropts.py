"""``--broker URL`` on the commands that read or write a job's topics (``topics``,
``produce``, ``consume``, ``offsets``, ``group``, ``state``, ``top``): the options, the
job they name, and opening its broker and group on Redis.

Without ``--broker`` a command works on the file log of ``DATA_DIR/JOB`` as before. With
it, the job's topics, committed offsets and group live in Redis under the job's keys
(``rs:{JOB}:...``); ``--job`` names the job, and may be left out when the database holds
one job (or one job has what the command names), as with ``--data-dir``.

A secret never leaves this module in a message: every error names the broker by
``RedisTarget.redacted`` and has the password cut out of what Redis or the client said.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rstreams.config import DEFAULT_DATA_DIR
from rstreams.errors import ConfigError, RStreamsError
from rstreams.options import add_argument
from rstreams.runtime.queues.broker import Broker

__all__ = [
    "JobAccess",
    "RedisRunError",
    "add_broker_options",
    "broker_errors",
    "redis_error_text",
    "redis_jobs",
    "refuse_broker",
    "run_redis_errors",
    "target_of",
]


#: The ``--broker`` options, as :class:`~rstreams.config.RunConfig` declares them (the
#: same flags, help and checks as on ``rstreams run``).
BROKER_OPTIONS = (
    "broker", "broker_password_file", "broker_tls_ca", "broker_tls_cert", "broker_tls_key",
)  # fmt: skip


def add_broker_options(p: argparse.ArgumentParser) -> None:
    """``--broker URL`` and the options that go with it (password file, TLS files)."""
    from rstreams.config import RunConfig

    g = p.add_argument_group("broker (default: the file log under --data-dir)")
    for name in BROKER_OPTIONS:
        add_argument(g, RunConfig, name)


def target_of(args: argparse.Namespace) -> Any:
    """The ``RedisTarget`` the options name, or None without ``--broker``."""
    url = getattr(args, "broker", None)
    if not url:
        for opt in ("password_file", "tls_ca", "tls_cert", "tls_key"):
            if getattr(args, f"broker_{opt}", None):
                flag = "--broker-" + opt.replace("_", "-")
                raise ConfigError(f"{flag} goes with --broker URL (the file log needs none)")
        return None
    try:
        import redis  # noqa: F401  (the `redis` extra)
    except ImportError as e:
        raise ConfigError(
            f"--broker needs the Redis client: pip install 'rstreams[redis]' ({e.name} missing)"
        ) from None
    from rstreams.config import RunConfig
    from rstreams.runtime.queues.brokers import broker_target

    # (RunConfig checks the options as `rstreams run` does; broker_target parses them)
    return broker_target(RunConfig(**{name: getattr(args, name) for name in BROKER_OPTIONS}))


@contextlib.contextmanager
def broker_errors(target: Any) -> Iterator[None]:
    """Turn what the Redis client raises during a command (the connection lost, a
    timeout, an error reply) into one ConfigError line (exit 2) that names the server
    without its password. Connecting already fails that way: see ``connect``."""
    try:
        yield
    except Exception as e:
        text = redis_error_text(e, target)
        if text is None:
            raise
        raise ConfigError(text) from None


@contextlib.contextmanager
def run_redis_errors(target: Any) -> Iterator[None]:
    """During a run over Redis (``target``; None: not on Redis): what the Redis client
    raises and the runtime did not ride out becomes one line (RedisRunError, exit 1)
    naming the cause and what to do, not a traceback."""
    try:
        yield
    except Exception as e:
        text = None if target is None else redis_error_text(e, target)
        if text is None:
            raise
        raise RedisRunError(text) from None


class RedisRunError(RStreamsError, RuntimeError):
    """A run over Redis failed on what the server answered (exit 1)."""


def redis_error_text(e: BaseException, target: Any) -> str | None:
    """One line for an error of the Redis client (None for any other error): the cause
    and what to do, naming the server without its password."""
    if not type(e).__module__.startswith("redis"):
        return None
    import redis.exceptions as rx

    said = target.scrub(str(e))
    where = target.redacted
    if isinstance(e, rx.OutOfMemoryError) or "OOM" in said.split(" ", 1)[0]:
        return (
            f"the Redis server {where} is out of memory ({_memory_limit(target)}): raise "
            "maxmemory (CONFIG SET maxmemory ...) or free memory there (the job's streams "
            "are trimmed as it commits; other keys are not), then run the same command "
            "again: it resumes from the last commit "
            f"({said})"
        )
    if isinstance(e, rx.NoPermissionError) or said.startswith("NOPERM"):
        return (
            f"the Redis user at {where} lacks a permission the run needs: {said}; grant it "
            "(docs/redis.md#security), then run the same command again"
        )
    if isinstance(e, (rx.ConnectionError, rx.TimeoutError)):
        return f"lost the Redis broker {where}: {said}"
    if isinstance(e, rx.RedisError):
        return f"the Redis broker {where} answered: {said}"
    return None


def _memory_limit(target: Any) -> str:
    """The server's maxmemory and policy (``INFO memory``, which a job's user may send),
    as an out of memory error says them; in general words if it does not answer."""
    from rstreams.runtime.queues.redisstreams import connect

    try:
        client = connect(target)
        try:
            info = client.info("memory")
        finally:
            client.close()
        return (
            f"maxmemory {info['maxmemory_human']} with policy {info['maxmemory_policy']} is reached"
        )
    except Exception:  # (the error said enough: this only adds the numbers)
        return "its maxmemory is reached and its policy evicts nothing"


def refuse_broker(args: argparse.Namespace, what: str, why: str) -> None:
    """Refuse (exit 2) ``what`` with ``--broker``: it works on the file log only."""
    if getattr(args, "broker", None):
        raise ConfigError(f"{what} does not work with --broker: {why}")


def redis_jobs(client: Any) -> list[str]:
    """The jobs that have keys in the client's database (``rs:{JOB}:...``), sorted."""
    jobs: set[str] = set()
    for key in client.scan_iter(match="rs:{*}:*", count=1000):
        text = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
        head, sep, _ = text[len("rs:{") :].partition("}:")
        if sep:
            jobs.add(head)
    return sorted(jobs)


class JobAccess:
    """One job's broker and group membership: the file log of ``DATA_DIR/JOB``, or Redis
    when ``target`` is given (statistics files stay under the local data directory)."""

    def __init__(self, data_dir: str, job: str, target: Any = None) -> None:
        if target is not None and ("{" in job or "}" in job):
            raise ConfigError(f"a job id on Redis has no braces (its keys' hash tag); got {job!r}")
        self.data_dir, self.job, self.target = data_dir, job, target
        self._client: Any = None

    @property
    def redis(self) -> bool:
        return self.target is not None

    def client(self) -> Any:
        """The Redis client (one per access, opened on first use)."""
        if self._client is None:
            self._client = self._connect()
        return self._client

    def _connect(self) -> Any:
        """A checked client of the target that gives up soon: a server that does not
        answer within a second is one line (a refused password at once: ``connect``
        never tries that again)."""
        from rstreams.runtime.queues.redisstreams import connect

        with broker_errors(self.target):
            return connect(self.target, patience=1.0)

    def exists(self) -> bool:
        """Has the job anything in the broker (or a log under the data directory)?"""
        if self.target is None:
            from rstreams.runtime.layout import JobLayout

            return JobLayout.of(self.data_dir, self.job).log.is_dir()
        glob = "".join("\\" + c if c in "*?[]\\" else c for c in self.job)
        pattern = "rs:{" + glob + "}:*"
        return next(iter(self.client().scan_iter(match=pattern, count=1000)), None) is not None

    def open_broker(self) -> Broker:
        """The job's broker (the caller closes it)."""
        if self.target is None:
            from rstreams.runtime.layout import JobLayout
            from rstreams.runtime.queues.brokers import open_broker

            return open_broker(JobLayout.of(self.data_dir, self.job).root)
        from rstreams.runtime.queues.brokers import open_redis_broker

        with broker_errors(self.target):
            return open_redis_broker(self.target, self.job, patience=1.0)

    def membership(self, group: str, member: str) -> Any:
        """A look at ``group``'s members (``describe``, ``task_owners``, ``generation``)
        that does not join it; None when the file log has no such group yet (looking
        would create its directory)."""
        if self.target is None:
            from rstreams.runtime.layout import JobLayout
            from rstreams.runtime.rebalance.membership import FileGroupMembership

            layout = JobLayout.of(self.data_dir, self.job)
            if not layout.group(group).dir.is_dir():
                return None
            return FileGroupMembership(layout.root, group, member)
        from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership

        return RedisGroupMembership(self.client(), self.job, group, member)

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None


def pick_redis_job(
    args: argparse.Namespace,
    has: Callable[[JobAccess], bool] | None,
    what: str,
    name_it: str = "--job",
) -> JobAccess:
    """The job ``--job`` names on ``--broker``; without it the only job there, or the
    only one that ``has`` what the command names (``what``, in words). ``name_it``: how
    the command names a job, for its errors."""
    target = target_of(args)
    data_dir = getattr(args, "data_dir", DEFAULT_DATA_DIR)
    if args.job:
        return JobAccess(data_dir, args.job, target)
    probe = JobAccess(data_dir, "", target)
    try:
        with broker_errors(target):
            jobs = redis_jobs(probe.client())
    finally:
        probe.close()
    where = target.redacted
    if len(jobs) == 1:
        return JobAccess(data_dir, jobs[0], target)
    if not jobs:
        raise ConfigError(f"no job has keys in {where}; name one with {name_it}")
    if has is None:
        raise ConfigError(
            f"{where} holds several jobs ({', '.join(jobs)}); pick one with {name_it}"
        )
    having = []
    for job in jobs:
        access = JobAccess(data_dir, job, target)
        try:
            with broker_errors(target):
                if has(access):
                    having.append(job)
        finally:
            access.close()
    if len(having) == 1:
        return JobAccess(data_dir, having[0], target)
    if not having:
        raise ConfigError(
            f"no job in {where} has {what} (its jobs: {', '.join(jobs)}); pick one with --job"
        )
    raise ConfigError(
        f"several jobs in {where} have {what}: {', '.join(having)}; pick one with --job"
    )


def redis_access(
    args: argparse.Namespace,
    *,
    topic: str | None = None,
    group: str | None = None,
    store: str | None = None,
) -> JobAccess:
    """:func:`pick_redis_job` for a command that names ``topic``, ``group`` or ``store``."""
    what, has = "", None
    if topic is not None or store is not None:
        if topic is None:
            from rstreams.state.inspect import changelog_of

            topic = changelog_of(str(store))
        what = f"the store {store!r}" if store is not None else f"the topic {topic!r}"
        has = _has_topic(topic)
    elif group is not None:
        what, has = f"the group {group!r}", _has_group(group)
    return pick_redis_job(args, has, what)


def _has_topic(topic: str) -> Callable[[JobAccess], bool]:
    def has(access: JobAccess) -> bool:
        with contextlib.closing(access.open_broker()) as b:
            return b.queue_count(topic) is not None

    return has


def _has_group(group: str) -> Callable[[JobAccess], bool]:
    def has(access: JobAccess) -> bool:
        with contextlib.closing(access.open_broker()) as b:
            if b.group_offsets(group):
                return True
        return bool(access.membership(group, "rstreams-cli").describe())

    return has
