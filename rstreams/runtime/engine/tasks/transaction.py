"""The transaction record of an exactly-once commit, and what builds it.

A task's exactly-once commit writes *one* record to the job's transaction topic (queue =
the task's index) before anything else: every frame the commit appends (outputs and
changelog records, encoded once, each already marked with the header
``rs.txn = <task>:<seq>``), where each target queue ended then, the input offsets it
commits, and where the task's time had got. The record is msgpack, a map::

    {"task": str, "seq": int, "offsets": {topic: offset},
     "appends": [[topic, queue, end offset then, frame payload, record count, max ts]],
     "times": [largest timestamp sent, largest watermark or told time sent short of the end],
     "told": {told shuffle topic: largest timestamp sent to it}}

Records written before ``times`` existed lack it (then both are unknown, NO_TIME);
those written before ``told`` lack that (then each told topic's time is the largest
timestamp sent to any, from ``times``: all a task kept then).

    >>> t = Transaction("0_1", 7, {"in": 3}, (Append("out", 0, 5, b"...", 1, 0),), (10, 12))
    >>> Transaction.decode(t.encode()) == t, t.marker
    (True, ('rs.txn', b'0_1:7'))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import attrs
import msgpack

from rstreams.runtime.engine.operators.watermarks import NO_TIME
from rstreams.runtime.queues.broker import Broker

#: The header marking the first record of every frame a transaction appends.
TXN_HEADER = "rs.txn"

#: Records as columns: timestamps, keys, values, headers.
TxnColumns = tuple[Sequence[int], Sequence[bytes | None], Sequence[bytes | None], Sequence[Any]]


def txn_marker(task: str, seq: int) -> tuple[str, bytes]:
    """The header that marks the frames of transaction ``seq`` of task ``task``."""
    return (TXN_HEADER, f"{task}:{seq}".encode())


class TransactionFormatError(ValueError):
    """Bytes that are not a transaction record (damaged, or not written by one)."""


class Append(NamedTuple):
    """One frame a transaction appends to ``topic[queue]``, which ended at ``hint``
    when the transaction was written (a redo searches its marker from there)."""

    topic: str
    queue: int
    hint: int
    payload: bytes
    records: int
    max_ts: int


@attrs.frozen
class Transaction:
    """One exactly-once commit of task ``task`` (its ``seq``-th)."""

    task: str
    seq: int
    #: Input offsets committed by it: topic -> the next offset to read.
    offsets: dict[str, int]
    appends: tuple[Append, ...]
    #: (largest timestamp sent, largest watermark or told time sent short of the end) at
    #: the commit: a new owner's time and watermark go on from there.
    times: tuple[int, int] = (NO_TIME, NO_TIME)
    #: Per told shuffle topic, the largest timestamp the task sent to it (the time it
    #: told that step): a new owner tells each step its own time, not the task's.
    told: dict[str, int] = attrs.field(factory=dict)

    @property
    def marker(self) -> tuple[str, bytes]:
        """The header that marks the frames of this transaction."""
        return txn_marker(self.task, self.seq)

    @property
    def written(self) -> list[tuple[str, int]]:
        """The (topic, queue)s it appends to."""
        return [(a.topic, a.queue) for a in self.appends]

    def encode(self) -> bytes:
        # Plain msgpack, not the internal serde: appends and times must come back as
        # tuples, and the serde's tuple extension costs a Python call per row.
        txn = {
            "task": self.task,
            "seq": self.seq,
            "offsets": self.offsets,
            "appends": [list(a) for a in self.appends],
            "times": self.times,
        }
        if self.told:  # (a task that tells no step writes what it wrote before)
            txn["told"] = self.told
        return msgpack.packb(txn, use_bin_type=True)

    @classmethod
    def decode(cls, data: bytes) -> Transaction:
        """The transaction ``data`` holds; :class:`TransactionFormatError` saying what is
        wrong if it holds none."""
        try:
            txn = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise TransactionFormatError(f"not msgpack: {e}") from None
        if not isinstance(txn, dict):
            raise TransactionFormatError(f"a transaction is a map, not {type(txn).__name__}")
        appends = txn.get("appends")
        if not isinstance(appends, tuple) or not all(
            isinstance(a, tuple) and len(a) == 6 and isinstance(a[3], bytes) for a in appends
        ):
            # e.g. written by an earlier release, which stored rows instead of frames
            raise TransactionFormatError(
                "its appends are not (topic, queue, hint, payload, count, max_ts)"
            )
        offsets = txn.get("offsets")
        if not isinstance(offsets, dict) or "seq" not in txn or "task" not in txn:
            raise TransactionFormatError("it lacks task, seq or offsets")
        out_time, high = txn.get("times", (NO_TIME, NO_TIME))
        try:
            return cls(
                str(txn["task"]),
                int(txn["seq"]),
                dict(offsets),
                tuple(Append(*a) for a in appends),
                (int(out_time), int(high)),
                {str(t): int(time) for t, time in txn.get("told", {}).items()},
            )
        except (ValueError, TypeError, AttributeError) as e:
            raise TransactionFormatError(f"a field has the wrong type: {e}") from None


class TransactionLog:
    """The changelog of a store while an exactly-once commit is built: changelog records
    wait here to join the transaction's appends (see ``ChangeLoggingStore``); end
    offsets are the broker's."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._pending: list[tuple[tuple[str, int], TxnColumns]] = []
        #: Ends of queues only this task appends to (its changelogs), as its last
        #: applied transaction left them: known without asking the broker.
        self._ends: dict[tuple[str, int], int] = {}
        self._queues: set[tuple[str, int]] = set()  # appended to

    def append_columns(
        self,
        topic: str,
        queue: int,
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[tuple],
    ) -> int:
        self._pending.append(((topic, queue), (timestamps, keys, values, headers)))
        self._queues.add((topic, queue))
        return self.end_offset(topic, queue)

    def end_offset(self, topic: str, queue: int) -> int:
        end = self._ends.get((topic, queue))
        return self.broker.end_offset(topic, queue) if end is None else end

    def known_ends(self, ends: dict[tuple[str, int], int]) -> None:
        """A transaction was applied that left these queues ending there: those this
        log appends to end there until its next one."""
        for queue in self._queues & ends.keys():
            self._ends[queue] = ends[queue]

    def take(self) -> list[tuple[tuple[str, int], TxnColumns]]:
        """What was appended since the last take, in order."""
        pending, self._pending = self._pending, []
        return pending
