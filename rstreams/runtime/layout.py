"""Where a job's files are: the one module that names the paths under a data directory.

``rstreams run --data-dir DIR`` keeps everything of job ``JOB`` here (as Kafka Streams'
``StateDirectory`` does for an application)::

    DIR/.JOB.lock                  the job lock: one run at a time (queues/joblock.py)
    DIR/JOB/                       JobLayout.root, "the job's directory"
        log/                       the file log: topics, consumer group offsets
        state/<store>/<queue>/     local copies of the state stores
        logs/worker-<slot>.log     what the workers of each slot wrote
        topology.json              the topology the job last ran with
        needs-rebuild.json         left by a repair that removed records of the job
        coordination/<group>/      a consumer group's files: see GroupLayout

Every module that reads or writes one of these asks :class:`JobLayout` (or
:class:`GroupLayout`) for its path rather than joining names itself, so that the layout
can be read, and changed, in one place.

>>> job = JobLayout.of("/data", "wc")
>>> job.log.as_posix(), job.lock.as_posix()
('/data/wc/log', '/data/.wc.lock')
>>> job.coordination.eoi_done("1_0").as_posix()
'/data/wc/coordination/wc/eoi/1_0.done'
>>> JobLayout.of_log("/data/wc/log") == job, JobLayout.of_log("/elsewhere")
(True, None)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import attrs

__all__ = [
    "JOB_ID",
    "NEEDS_REBUILD_FILE",
    "TOPOLOGY_FILE",
    "GroupLayout",
    "JobLayout",
    "check_job_id",
    "job_id_arg",
    "store_dir",
]

#: The file log's directory in a job's directory.
LOG_DIR = "log"
#: Where a job's directory keeps the topology it last ran with.
TOPOLOGY_FILE = "topology.json"
#: Left in a job's directory by a repair that removed records the job consumed.
NEEDS_REBUILD_FILE = "needs-rebuild.json"
_COORDINATION = "coordination"
_WORKER_STATS = "worker-{}.json"


def _path(value: str | os.PathLike[str]) -> Path:
    return Path(value)


def store_dir(state_dir: str | os.PathLike[str], store: str, queue: int) -> Path:
    """The local copy of queue ``queue`` of store ``store`` in a state directory (a job's
    is :attr:`JobLayout.state`)."""
    return Path(state_dir) / store / str(queue)


@attrs.frozen
class GroupLayout:
    """The files of one consumer group, ``<job dir>/coordination/<group>/``: its
    membership (rebalance/membership.py), and what the job's supervisor and workers tell
    each other through it (end of input, restore progress, skip counts, statistics)::

        generation, coordinator.lock     the group's generation and the lock of its bumps
        members/<id>.lock, <id>.json     a live member's lock, its pid and heartbeat
        tasks/<task>.lock                held by the member running <task>
        eoi/<sub-topology>, <task>.done  end of input declared, and a task done with it
        restore/<task>                   a task's restore progress while it restores
        skipped/<task>                   a task's count of skipped records per commit
        stats/supervisor.json, worker-<member>.json    live statistics (coordination/stats.py)

    >>> g = GroupLayout("/d/wc/coordination/wc")
    >>> g.member_lock("w0-1").as_posix(), g.worker_stats("w0-1").name
    ('/d/wc/coordination/wc/members/w0-1.lock', 'worker-w0-1.json')
    """

    dir: Path = attrs.field(converter=_path)

    @classmethod
    def of(cls, job_dir: str | os.PathLike[str], group: str) -> GroupLayout:
        """Group ``group`` of the job whose directory is ``job_dir``."""
        return cls(Path(job_dir) / _COORDINATION / group)

    # -- membership ----------------------------------------------------------------------

    @property
    def generation(self) -> Path:
        return self.dir / "generation"

    @property
    def coordinator_lock(self) -> Path:
        return self.dir / "coordinator.lock"

    @property
    def members(self) -> Path:
        return self.dir / "members"

    def member_lock(self, member: str) -> Path:
        return self.members / f"{member}.lock"

    def member_info(self, member: str) -> Path:
        return self.members / f"{member}.json"

    def member_joining(self, member: str, pid: int) -> Path:
        """Where a joining member locks its lock file before it shows it (see join)."""
        return self.members / f".{member}.{pid}.joining"

    def listed_members(self) -> list[str]:
        """Members with a lock file (alive or not)."""
        return [p.stem for p in self.members.glob("*.lock")]

    @property
    def tasks(self) -> Path:
        return self.dir / "tasks"

    def task_lock(self, task: str) -> Path:
        return self.tasks / f"{task}.lock"

    def listed_tasks(self) -> list[str]:
        """Tasks with a lock file (held or not), sorted."""
        return sorted(p.stem for p in self.tasks.glob("*.lock"))

    # -- supervisor and workers ----------------------------------------------------------

    @property
    def eoi(self) -> Path:
        return self.dir / "eoi"

    def eoi_declared(self, subtopology: int) -> Path:
        """Exists once the supervisor declared end of input to ``subtopology``."""
        return self.eoi / str(subtopology)

    def eoi_done(self, task: object) -> Path:
        """Exists once ``task`` finished its input and committed."""
        return self.eoi / f"{task}.done"

    @property
    def restore(self) -> Path:
        return self.dir / "restore"

    def restore_file(self, task: object) -> Path:
        return self.restore / str(task)

    def restore_files(self) -> list[Path]:
        """The progress files of the tasks restoring now (not temporary files)."""
        return list(self.restore.glob("[!.]*"))

    def skipped_file(self, task: object) -> Path:
        return self.dir / "skipped" / str(task)

    @property
    def stats(self) -> Path:
        return self.dir / "stats"

    @property
    def supervisor_stats(self) -> Path:
        return self.stats / "supervisor.json"

    def worker_stats(self, member: str) -> Path:
        return self.stats / _WORKER_STATS.format(member)

    def worker_stats_files(self) -> list[Path]:
        """Every worker's statistics file, sorted."""
        return sorted(self.stats.glob(_WORKER_STATS.format("*")))


#: What a job id may be: StreamBuilder's rule for names (rstreams.dsl.nodes.check_name),
#: so that it is one path component under the data directory and one Redis hash tag.
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_job_id(job: str) -> str:
    """``job`` if it is a valid job id, else ValueError: ``../victim``, an absolute path
    or a name with ``/`` would put the job's files outside the data directory. (The
    command line checks its JOB arguments with :func:`job_id_arg`: exit 2.)"""
    if not isinstance(job, str) or not JOB_ID.fullmatch(job):
        raise ValueError(
            f"invalid job id {job!r}: a job id is letters, digits, '.', '_' or '-', starting "
            "with a letter or digit (it names a directory under the data directory)"
        )
    return job


def job_id_arg(value: str) -> str:
    """argparse ``type=`` of a JOB argument: :func:`check_job_id`, as a usage error."""
    import argparse

    try:
        return check_job_id(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@attrs.frozen
class JobLayout:
    """The files of job ``job`` in its directory ``root`` (``<data dir>/<job>``; tests
    may give another directory)."""

    root: Path = attrs.field(converter=_path)
    job: str

    @classmethod
    def of(cls, data_dir: str | os.PathLike[str], job: str) -> JobLayout:
        """Job ``job`` under data directory ``data_dir`` (ValueError for a job id that is
        not one: see :func:`check_job_id`)."""
        return cls(Path(data_dir) / check_job_id(job), job)

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> JobLayout:
        """The job whose directory is ``root`` (named after it)."""
        return cls(root, Path(root).name)

    @classmethod
    def of_log(cls, log_dir: str | os.PathLike[str]) -> JobLayout | None:
        """The job whose file log is ``log_dir``, or None if it is no job's log."""
        path = Path(log_dir)
        return cls(path.parent, path.parent.name) if path.name == LOG_DIR else None

    @staticmethod
    def jobs(data_dir: str | os.PathLike[str]) -> list[str]:
        """The jobs that have a log under ``data_dir``, sorted (a directory whose name is
        no job id, as ``my job``, is no job's: no command could name it)."""
        base = Path(data_dir)
        if not base.is_dir():
            return []
        return sorted(
            p.name for p in base.glob("*") if JOB_ID.fullmatch(p.name) and (p / LOG_DIR).is_dir()
        )

    @property
    def data_dir(self) -> Path:
        return self.root.parent

    @property
    def lock(self) -> Path:
        """The job lock's file (beside the job's directory: ``--fresh`` deletes that)."""
        return self.data_dir / f".{self.job}.lock"

    @property
    def log(self) -> Path:
        return self.root / LOG_DIR

    @property
    def state(self) -> Path:
        return self.root / "state"

    def store_dirs(self, queue: int) -> list[Path]:
        """The local copies of every store's queue ``queue`` (``state/<store>/<queue>``)."""
        return sorted(self.state.glob(str(store_dir("", "*", queue))))

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def worker_log(self, slot: int) -> Path:
        return self.logs / f"worker-{slot}.log"

    @property
    def topology(self) -> Path:
        return self.root / TOPOLOGY_FILE

    @property
    def needs_rebuild(self) -> Path:
        return self.root / NEEDS_REBUILD_FILE

    def group(self, name: str) -> GroupLayout:
        return GroupLayout.of(self.root, name)

    @property
    def coordination(self) -> GroupLayout:
        """The job's own consumer group (named after the job)."""
        return self.group(self.job)
