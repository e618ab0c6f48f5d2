"""The files a worker keeps per task for the supervisor, under the group's directory:
the progress of a task restoring its state (:func:`restore_progress` sums them for the
progress line) and each task's count of skipped records with the positions it covers
(:func:`skipped_at` reads the count a commit made true)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rstreams.runtime.engine.tasks.taskid import TaskId
from rstreams.runtime.layout import GroupLayout

if TYPE_CHECKING:
    from rstreams.runtime.engine.tasks.task import Task


class TaskFiles:
    """What one worker writes for its tasks."""

    def __init__(self, layout: GroupLayout) -> None:
        self.layout = layout
        #: Per task: [records skipped before this worker owned it, count last published].
        self._skipped: dict[TaskId, list[int]] = {}

    def started(self, task_id: TaskId, positions: dict[str, int]) -> None:
        """A task starts here at ``positions``: its skip count goes on from there."""
        base = skipped_at(self.layout.dir, task_id, positions)
        self._skipped[task_id] = [base, base]

    def forget(self, task_id: TaskId) -> None:
        self._skipped.pop(task_id, None)

    def restore_progress(self, task: str, done: int, total: int) -> None:
        """Publish a task's restore progress for the supervisor's progress line (a file
        per task under ``coordination/<job>/restore``, gone when the restore is done)."""
        path = self.layout.restore_file(task)
        if done >= total:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{task}.{os.getpid()}.tmp")
        tmp.write_text(f"{done} {total}")
        tmp.replace(path)

    def publish_skipped(self, tasks: Mapping[TaskId, Task]) -> None:
        """Before a commit: publish each task's count of skipped records with the
        positions the commit covers (read by :func:`skipped_at`). Keeps the count the
        last commit covered too, in case this commit never happens."""
        for task_id, task in tasks.items():
            counts = self._skipped.get(task_id)
            if counts is None:
                continue
            total = counts[0] + task.ctx.metrics["skipped"]
            if total == counts[1]:
                continue
            path = self.layout.skipped_file(task_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            entries = [*_read_skipped(path)[-1:], (dict(task.positions), total)]
            tmp = path.with_name(f".{task_id}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entries))
            tmp.replace(path)
            counts[1] = total


def restore_dir(group_dir: Path) -> Path:
    return GroupLayout(group_dir).restore


def restore_progress(group_dir: Path) -> tuple[int, int] | None:
    """(offsets replayed, offsets to replay) over the tasks restoring now, or None."""
    done = total = 0
    for f in GroupLayout(group_dir).restore_files():
        try:
            d, t = (int(x) for x in f.read_text().split())
        except (OSError, ValueError):
            continue  # finished meanwhile, or being replaced
        done += d
        total += t
    return (done, total) if total else None


def _read_skipped(path: Path) -> list[tuple[dict[str, int], int]]:
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    return [(dict(positions), int(count)) for positions, count in entries]


def skipped_at(group_dir: Path, task: TaskId, committed: dict[str, int]) -> int:
    """How many records ``task`` skipped (over all its owners) in the input up to the
    ``committed`` positions. Workers write the count with the positions it covers before
    each commit (see :meth:`TaskFiles.publish_skipped`), so the count that holds is the
    largest one whose positions are not beyond what was committed: a count written for a
    commit that never happened (the worker died) is not taken, and the records it
    counted are counted again by whoever processes them again."""
    best = 0
    for positions, count in _read_skipped(GroupLayout(group_dir).skipped_file(task)):
        if all(pos <= committed.get(topic, 0) for topic, pos in positions.items()):
            best = max(best, count)
    return best
