"""The job an admin command works on, and the checks every command makes before it
opens it: ``--job`` or the only job that has what the command names, in the data
directory or with ``--broker URL`` in Redis; a topic name the log can keep; a
``--data-dir`` the log can take its locks in."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rstreams.brokeropts import JobAccess, broker_errors, redis_access, target_of
from rstreams.errors import ConfigError
from rstreams.runtime.layout import JobLayout
from rstreams.runtime.queues.broker import Broker


def job_root(
    data_dir: str,
    job: str | None,
    *,
    topic: str | None = None,
    group: str | None = None,
    store: str | None = None,
) -> Path:
    """``DATA_DIR/JOB`` of ``job``; without one, of the only job in ``data_dir``, or of
    the only job that has ``topic``, ``group`` or ``store`` (the thing the command
    names). Several candidates: an error that lists them."""
    base = Path(data_dir)
    if job:
        layout = JobLayout.of(data_dir, job)
        if not layout.log.is_dir():
            raise ConfigError(f"no job {job!r} in {data_dir} (no {layout.log})")
        return layout.root
    jobs = JobLayout.jobs(data_dir)
    if len(jobs) == 1:
        return base / jobs[0]
    if not jobs:
        raise ConfigError(f"no job has run in {data_dir!r}; run one or give --data-dir")
    what, has = _named_thing(topic, group, store)
    if has is None:
        raise ConfigError(
            f"{data_dir!r} holds several jobs ({', '.join(jobs)}); pick one with --job"
        )
    having = [j for j in jobs if has(base / j)]
    if len(having) == 1:
        return base / having[0]
    if not having:
        raise ConfigError(
            f"no job in {data_dir!r} has {what} (its jobs: {', '.join(jobs)}); pick one with --job"
        )
    raise ConfigError(
        f"several jobs in {data_dir!r} have {what}: {', '.join(having)}; pick one with --job"
    )


def _named_thing(
    topic: str | None, group: str | None, store: str | None
) -> tuple[str, Callable[[Path], bool] | None]:
    """What a command names, in words, and the test of whether a job's root has it."""
    from rstreams.runtime.queues.filelog import has_group, has_topic

    if topic is not None:
        return f"the topic {topic!r}", lambda root: has_topic(JobLayout.at(root).log, topic)
    if store is not None:
        from rstreams.state.inspect import changelog_of

        changelog = changelog_of(store)
        return f"the store {store!r}", lambda root: has_topic(JobLayout.at(root).log, changelog)
    if group is not None:

        def has(root: Path) -> bool:
            job = JobLayout.at(root)
            return has_group(job.log, group) or job.group(group).dir.is_dir()

        return f"the group {group!r}", has
    return "", None


def access(
    args: argparse.Namespace,
    create: bool = False,
    topic: str | None = None,
    group: str | None = None,
    store: str | None = None,
) -> JobAccess:
    """The job the command works on: ``--job``, or the one found (see :func:`job_root`)."""
    if args.broker:
        found = redis_access(args, topic=topic, group=group, store=store)
    else:
        if create and args.job:
            root = JobLayout.of(args.data_dir, args.job).root
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = job_root(args.data_dir, args.job, topic=topic, group=group, store=store)
        found = JobAccess(str(root.parent), root.name)
    args.job = found.job  # the job found, for what the command reads next
    return found


def open_broker(
    args: argparse.Namespace,
    create: bool = False,
    topic: str | None = None,
    group: str | None = None,
) -> Broker:
    """The broker of the job the command works on (see :func:`access`)."""
    return access(args, create, topic, group).open_broker()


def check_topic_name(topic: str | None) -> None:
    """Refuse a topic name the log can not keep as one directory of its own."""
    if topic is None:
        return
    if not topic or "/" in topic or "\\" in topic or ".." in topic or "\0" in topic:
        raise ConfigError(
            f"invalid topic name {topic!r}: a topic name must be non-empty and contain "
            "no '/', '\\', '..' or NUL"
        )


def known_queues(broker: Broker, topic: str) -> int:
    """The queue count of ``topic``; an error that lists the topics when it has none."""
    n = broker.queue_count(topic)
    if n is None:
        known = ", ".join(sorted(broker.topics())) or "none"
        raise ConfigError(f"topic {topic!r} does not exist (topics: {known})")
    return int(n)


def on_data_dir(
    cmd: Callable[[argparse.Namespace], int],
    read_only: Callable[[argparse.Namespace], bool] = lambda args: False,
    creates: Callable[[argparse.Namespace], bool] = lambda args: False,
) -> Callable[[argparse.Namespace], int]:
    """``cmd``, refusing first a --data-dir that is a file, is under one or is not
    writable: opening the log takes lock files in it, and the bare OSError of that says
    nothing of --data-dir. Not checked for writing: a command that only reads
    (``read_only(args)``), and one that creates nothing (``creates(args)``) in a data
    directory that does not exist (its own error, "no job has run", says more)."""
    from rstreams.runtime.results import check_data_dir

    def checked(args: argparse.Namespace) -> int:
        target = target_of(args)
        if target is not None:  # (nothing of the job in the data directory)
            with broker_errors(target):
                return cmd(args)
        write = not read_only(args) and (creates(args) or Path(args.data_dir).exists())
        check_data_dir(args.data_dir, write=write)
        return cmd(args)

    return checked
