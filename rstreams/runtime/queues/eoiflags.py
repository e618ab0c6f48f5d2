"""Where a bounded run's end of input is declared and answered: files, or the broker.

The supervisor declares end of input to a sub-topology; each of its tasks, wherever it
runs, finishes and says it is done (see the endofinput module). On the file log these
are files of the group's directory (:class:`FileEoiFlags`); with ``--broker`` the
workers may run on other hosts (``rstreams run --join``), so they are two sets in the
broker itself (:class:`RedisEoiFlags`), under the job's keys.
"""

from __future__ import annotations

import shutil
from typing import Any, Protocol

from rstreams.runtime.layout import GroupLayout


class EoiFlags(Protocol):
    """End of input declared to sub-topologies, and done by tasks."""

    def reset(self) -> None:
        """Forget every declaration and answer (a new bounded run)."""

    def declare(self, subtopology: int) -> None: ...

    def declared(self, subtopology: int) -> bool: ...

    def mark_done(self, task: object) -> None: ...

    def done(self, task: object) -> bool: ...

    def any_declared(self) -> bool:
        """Was end of input declared to any sub-topology (a cheap first look)?"""


class FileEoiFlags:
    """The flags as files under ``<group dir>/eoi/``."""

    def __init__(self, group: GroupLayout) -> None:
        self.group = group

    def reset(self) -> None:
        shutil.rmtree(self.group.eoi, ignore_errors=True)

    def declare(self, subtopology: int) -> None:
        self.group.eoi.mkdir(parents=True, exist_ok=True)
        self.group.eoi_declared(subtopology).touch()

    def declared(self, subtopology: int) -> bool:
        return self.group.eoi_declared(subtopology).exists()

    def mark_done(self, task: object) -> None:
        self.group.eoi_done(task).touch()

    def done(self, task: object) -> bool:
        return self.group.eoi_done(task).exists()

    def any_declared(self) -> bool:
        return self.group.eoi.is_dir()


class RedisEoiFlags:
    """The flags as two Redis sets of job ``job``: sub-topologies declared, tasks done."""

    def __init__(self, client: Any, job: str) -> None:
        self.client = client
        # (the job's hash tag: every key of a job in one slot of a Redis Cluster)
        self.declared_key = f"rs:{{{job}}}:eoi:declared"
        self.done_key = f"rs:{{{job}}}:eoi:done"

    def reset(self) -> None:
        self.client.delete(self.declared_key, self.done_key)

    def declare(self, subtopology: int) -> None:
        self.client.sadd(self.declared_key, str(subtopology))

    def declared(self, subtopology: int) -> bool:
        return bool(self.client.sismember(self.declared_key, str(subtopology)))

    def mark_done(self, task: object) -> None:
        self.client.sadd(self.done_key, str(task))

    def done(self, task: object) -> bool:
        return bool(self.client.sismember(self.done_key, str(task)))

    def any_declared(self) -> bool:
        return bool(self.client.exists(self.declared_key))
