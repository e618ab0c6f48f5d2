"""Restore: bring a task's stores up to their changelogs' end before it processes.

A RocksDB store whose recorded changelog offset (its checkpoint, written in one
WriteBatch with the data) is still within its changelog replays only the tail after
it; otherwise, and for memory stores, the store is cleared and the changelog replayed
from its start (latest value per key wins, tombstones delete). Each chunk read is
checked (state that can not be read back is refused, never reset) and written with the
offset it brings the store to, so a restore cut short goes on from there.

A store ahead of its changelog, or a changelog that can not be read, has lost state
that nothing else holds: :class:`~rstreams.state.stores.LostStateError`. A damaged
local copy (:class:`~rstreams.state.stores.StoreDamagedError`) is deleted by
:func:`discard_damaged_store` and rebuilt from the changelog by the task's next build.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rstreams.errors import SerdeError, StateStoreError
from rstreams.runtime.engine.tasks.faults import maybe_crash
from rstreams.runtime.queues.base import RecordColumns
from rstreams.runtime.queues.broker import Broker
from rstreams.serde import INTERNAL_SERDE
from rstreams.state.metered import MeteredStore
from rstreams.state.stores import LostStateError, StoreDamagedError

log = logging.getLogger("rstreams.task")

#: Where the advice of errors that only a rebuild from the input can cure points to.
REBUILD_ADVICE = (
    "rebuild the job from its input with `rstreams run PIPELINE --input ... --fresh` "
    "(docs/state.md#recovering-from-damage)"
)

#: Changelog records read (and written to the store) at a time.
CHUNK = 10_000


def discard_damaged_store(error: StoreDamagedError, state_dir: str | None, who: str) -> None:
    """Delete the local copy of the store ``error`` names, so that it is rebuilt from
    its changelog; with a warning. Only ever a directory under ``state_dir``: otherwise
    (or with no path) ``error`` is raised."""
    path = Path(error.path) if error.path else None
    root = Path(state_dir).resolve() if state_dir else None
    if path is None or root is None or not path.resolve().is_relative_to(root):
        raise error
    log.warning(
        "%s: state store %r is damaged (%s); deleting its local copy %s and "
        "rebuilding it from its changelog",
        who, error.store, error, path,
    )  # fmt: skip
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        raise StateStoreError(
            f"state store {error.store!r}: can not delete its damaged local copy {path}; "
            f"delete it by hand and run again ({error})",
            store=error.store,
            path=str(path),
        ) from error


class Restorer:
    """Replays the changelogs of task ``task_id``'s stores (queue ``queue``) into them.

    ``on_restore`` is called with (task id, changelog offsets replayed, offsets to
    replay) about twice a second while restoring, and once at the end.
    """

    def __init__(
        self,
        task_id: str,
        queue: int,
        broker: Broker,
        on_restore: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.task_id = task_id
        self.queue = queue
        self.broker = broker
        self.on_restore = on_restore

    def restore(self, stores: Mapping[str, MeteredStore], changelogs: Mapping[str, str]) -> int:
        """Bring every store of ``stores`` up to the end of its changelog (store name ->
        topic in ``changelogs``); returns the records replayed."""
        maybe_crash("restore")
        started = time.monotonic()
        plan = [
            (name, topic, *self._start(name, stores[name], topic))
            for name, topic in changelogs.items()
        ]
        total = sum(end - pos for _, _, pos, end in plan)
        if total:
            log.info("task %s: restoring state from %d changelog offsets", self.task_id, total)
        n = done = 0
        next_report = started + 0.5
        for name, topic, pos, end in plan:
            store = stores[name]
            first = pos
            while pos < end:
                records = self._read(name, topic, pos)
                if not len(records):
                    break
                self._check(records, store.value_serde, topic)
                pos = records.last_offset + 1
                # _check refused records without a key: the keys are bytes.
                store.restore(records.keys, records.values, pos)  # type: ignore[arg-type]
                n += len(records)
                if self.on_restore is not None and time.monotonic() >= next_report:
                    self.on_restore(self.task_id, done + pos - first, total)
                    next_report = time.monotonic() + 0.5
            done += end - first
        if self.on_restore is not None:
            self.on_restore(self.task_id, total, total)
        if n:
            took = time.monotonic() - started
            log.info(
                "task %s: restored %d changelog records in %.1f s (%.0f records/s)",
                self.task_id, n, took, n / took if took else 0.0,
            )  # fmt: skip
        return n

    def _start(self, name: str, store: MeteredStore, topic: str) -> tuple[int, int]:
        """(offset to replay from, end) of ``store``'s changelog ``topic``; clears the
        store when it replays from the start."""
        start = self.broker.start_offset(topic, self.queue)
        end = self.broker.end_offset(topic, self.queue)
        checkpoint = store.changelog_offset
        if checkpoint is not None and checkpoint > end:
            # The store had records its changelog no longer has: they are lost.
            raise LostStateError(
                f"task {self.task_id}: state store {name!r} is at offset {checkpoint} of "
                f"its changelog {topic}[{self.queue}], which ends at {end}: records "
                f"{end}..{checkpoint - 1} of {topic}[{self.queue}]@{end} are gone "
                f"(the log was cut or lost its tail), and the state they held with "
                f"them; {REBUILD_ADVICE}",
                store=name, topic=topic, queue=self.queue, offset=end,
            )  # fmt: skip
        inner = store.inner
        if checkpoint is None and inner.dropped_files:
            log.warning(
                "task %s: state store %r lost SST files its MANIFEST no longer lists "
                "(%s; a damaged MANIFEST?); rebuilding it from its changelog",
                self.task_id, name, ", ".join(inner.dropped_files),
            )  # fmt: skip
        if checkpoint is not None and start <= checkpoint <= end:
            return checkpoint, end  # a valid local checkpoint: replay the tail only
        if len(inner):
            if checkpoint is None:  # every write of a task's store records one
                log.warning(
                    "task %s: state store %r holds data but no changelog offset (its "
                    "local copy lost part of its history, e.g. a damaged MANIFEST); "
                    "deleting it and rebuilding it from its changelog",
                    self.task_id, name,
                )  # fmt: skip
            store.clear()
        return start, end

    def _read(self, store: str, topic: str, pos: int) -> RecordColumns:
        from rstreams.runtime.queues.filelog import CorruptLogError

        try:
            return self.broker.read_columns(topic, self.queue, pos, CHUNK)
        except CorruptLogError as e:
            if e.topic != topic:
                raise
            at = pos if e.offset is None else e.offset
            raise LostStateError(
                f"task {self.task_id}: state store {store!r} can not be restored: its "
                f"changelog {topic}[{self.queue}]@{at} can not be read ({e.segment}: "
                f"{e.reason}); it is the only durable copy of that state: {REBUILD_ADVICE}",
                store=store, topic=topic, queue=self.queue, offset=at,
            ) from e  # fmt: skip

    def _check(self, records: RecordColumns, serde: Any, topic: str) -> None:
        """Refuse state that can not be read back, naming where it is: never reset it."""
        try:
            if not all(records.keys):  # None, or b"" (no msgpack value is empty)
                raise SerdeError("a changelog record has no key")
            values = records.values
            # Values may be None (tombstones); b"" is never a valid value and fails below.
            serde.deserialize_many(values if all(values) else [v for v in values if v is not None])
            INTERNAL_SERDE.deserialize_many(records.keys)  # type: ignore[arg-type]
            return
        except Exception:
            pass
        for r in records.records():
            try:
                if r.key is None:
                    raise SerdeError("a changelog record has no key")
                INTERNAL_SERDE.deserialize(r.key)
                if r.value is not None:
                    serde.deserialize(r.value)
            except Exception as e:
                raise SerdeError(
                    f"task {self.task_id}: bad state in changelog "
                    f"{topic}[{self.queue}]@{r.offset}: {e}; refusing to restore (fix or "
                    "remove the record; state is not reset)"
                ) from None
