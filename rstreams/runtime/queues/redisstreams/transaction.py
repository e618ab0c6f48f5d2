"""Appends and commits applied together on Redis: :class:`Transaction`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rstreams.errors import ConfigError, FencedError
from rstreams.runtime.queues._logformat import decode_batch, record_columns
from rstreams.runtime.queues.offsets import check_commit
from rstreams.runtime.queues.redisstreams.codec import (
    append_op,
    check_columns,
    foreign,
    pack_ops,
)

if TYPE_CHECKING:
    from rstreams.runtime.queues.redisstreams.broker import RedisBroker


class Transaction:
    """Operations queued for one atomic server-side step (the broker's write script).

    Made by :meth:`RedisBroker.transaction`; every call checks its arguments at once
    (the same errors as the broker's own methods) and queues; :meth:`execute` applies
    everything or nothing. After it, :attr:`first_offsets` holds the first offset of
    each append, in order.
    """

    def __init__(self, broker: RedisBroker, fence: tuple[str, str] | None = None) -> None:
        self.broker = broker
        self.keys: list[str] = []
        self._index: dict[str, int] = {}
        self._queues: dict[str, tuple[str, int]] = {}  # stream key -> (topic, queue)
        #: Fence key -> the value it must hold.
        self.fences: dict[str, str] = {}
        self.ops: list[list[Any]] = []
        self.first_offsets: list[int] = []
        self._appended: list[tuple[tuple[str, int], int]] = []  # per append: queue, count
        #: Records appended so far.
        self.records = 0
        if fence is not None:
            self.add_fence(*fence)

    def add_fence(self, key: str, expected: str) -> None:
        """Apply nothing unless ``key`` holds ``expected`` (one more fence: a worker's
        commit of several tasks checks every task's, and applies everything or nothing).
        A key fenced twice must hold the value given last."""
        self._key_index(key)
        self.fences[key] = expected

    def _key_index(self, key: str) -> int:
        i = self._index.get(key)
        if i is None:
            self.keys.append(key)
            i = self._index[key] = len(self.keys)  # Lua's KEYS count from 1
        return i

    def append(
        self,
        topic: str,
        queue: int,
        records: Iterable[tuple[int, bytes | None, bytes | None, tuple]],
    ) -> None:
        """Queue :meth:`RedisBroker.append` of (timestamp, key, value, headers) records."""
        columns = record_columns(records)
        if columns is None:
            self.broker._key(topic, queue)  # (checks the queue)
            return
        self.append_columns(topic, queue, *columns)

    def append_columns(
        self,
        topic: str,
        queue: int,
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[tuple],
    ) -> None:
        """Queue :meth:`RedisBroker.append_columns`."""
        key = self.broker._key(topic, queue)
        if not check_columns(timestamps, keys, values, headers):
            return
        self._queues[key] = (topic, queue)
        where = (self._key_index(key), self._key_index(self.broker.key("ends")), f"{topic}:{queue}")
        self.ops.append(
            append_op(where, timestamps, keys, values, headers, self.broker.entry_records)
        )
        self._appended.append(((topic, queue), len(timestamps)))
        self.records += len(timestamps)

    def append_encoded(
        self, topic: str, queue: int, payload: bytes, count: int, max_ts: int
    ) -> None:
        """Queue :meth:`RedisBroker.append_encoded`."""
        c = decode_batch(payload, count)
        self.append_columns(topic, queue, c.timestamps, c.keys, c.values, c.headers)

    def ends(self) -> dict[tuple[str, int], int]:
        """After :meth:`execute`: where each queue appended to ended then."""
        return {
            queue: first + count
            for (queue, count), first in zip(self._appended, self.first_offsets, strict=True)
        }

    def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        """Queue :meth:`RedisBroker.commit`."""
        self.broker._check_open()
        check_commit(group, topic, queue, offset)
        hash_key = self._key_index(self.broker.offsets_key(group))
        groups = self._key_index(self.broker.key("groups"))
        self.ops.append(["c", hash_key, f"{topic}:{queue}", str(int(offset)), groups, group])

    def execute(self) -> None:
        """Apply everything queued, all or nothing (nothing to do without operations
        unless there is a fence: then it is still checked), in one round trip."""
        if not self.ops and not self.fences:
            return
        owner = self.broker.owner_fence
        if owner is not None and owner[0] not in self.fences:
            self.add_fence(*owner)
        self.broker._check_open()
        fences = [str(len(self.fences))]
        for key, expected in self.fences.items():
            fences += [str(self._index[key]), expected]
        reply = self.broker._write(self.keys, [*fences, pack_ops(self.ops)])
        status = reply[0]
        if status == b"ok":
            self.first_offsets = [int(first) for first in reply[1:]]
        elif status == b"fenced":
            current = reply[1].decode() if reply[1] else None
            key = reply[2].decode()
            raise FencedError(
                f"commit refused: {key} holds {current!r}, not {self.fences[key]!r} "
                "(this writer was replaced); nothing of it was applied"
            )
        elif status == b"foreign":
            raise ConfigError(f"{reply[1].decode()}: {foreign()}")
        else:
            key = reply[1].decode()
            topic, queue = self._queues[key]
            raise self.broker._gone(topic, queue, key, None)
