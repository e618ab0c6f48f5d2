"""The commit protocol of one task (see the task module for the whole of it).

A :class:`Committer` takes what a task did since its last commit: the records its
producer holds, the changes its store stacks flush, its input positions. At-least-once,
it writes them at once. Exactly-once, it builds one
:class:`~rstreams.runtime.engine.tasks.transaction.Transaction` of them, appends it (the
commit point, once the broker syncs it), then applies it: the outputs, the offsets, and
last the stores. :meth:`Committer.recover` finishes a transaction a previous owner left
half applied.

On a broker with atomic transactions (Redis: ``broker.transaction(fence=...)``) and a
``fence`` (the task's ownership token), one transaction applies the outputs, the
changelog records, the control records, the transaction record (kept for where the
task's time got; with no appends, nothing to redo) and the input positions, or nothing:
a worker whose task was taken over can not write, its commit raises
:class:`~rstreams.errors.FencedError`. That transaction is the worker's, not the
task's: ``commit_tasks`` puts every task's commit, and every task's fence, into one
(one round trip; one per ``MAX_TRANSACTION_RECORDS`` records for a big commit, a task's
commit whole in one), so if a task of the worker was taken over, nothing of any task
of its transaction is applied; the worker drops all its tasks, and their next owners
(maybe this worker again) go on from their last commits: exactly once either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rstreams.errors import SerdeError
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.engine.operators.watermarks import NO_TIME
from rstreams.runtime.engine.tasks.faults import maybe_crash
from rstreams.runtime.engine.tasks.restorer import REBUILD_ADVICE
from rstreams.runtime.engine.tasks.transaction import (
    Append,
    Transaction,
    TransactionFormatError,
    TransactionLog,
    TxnColumns,
    txn_marker,
)
from rstreams.runtime.queues._logformat import encode_column_batch
from rstreams.runtime.queues.broker import Broker
from rstreams.state.changelogging import ChangelogLog
from rstreams.state.metered import MeteredStore
from rstreams.state.stores import LostStateError

#: Transactions between two purges of a task's transaction queue (only the last one is
#: ever read again).
PURGE_EVERY = 100


class Commit:
    """A commit between its phases (see ``commit_tasks``)."""

    __slots__ = ("at", "offsets", "stores", "tx", "txn", "written")

    def __init__(
        self,
        txn: Transaction | None,
        at: int,
        written: list[tuple[str, int]],
        tx: Any = None,
        offsets: dict[str, int] | None = None,
        stores: Sequence[MeteredStore] = (),
    ) -> None:
        self.txn = txn
        self.at = at  # offset of the transaction record
        self.written = written
        #: Atomic: the worker's broker transaction this commit joined, the input offsets
        #: and the stores it writes once that transaction is applied.
        self.tx = tx
        self.offsets = offsets
        self.stores = stores


class Committer:
    """Commits for task ``task_id`` (queue ``queue``, consumer group ``group``);
    exactly-once when it has a transaction queue ``txn_topic[txn_queue]``."""

    def __init__(
        self,
        task_id: str,
        queue: int,
        group: str,
        broker: Broker,
        producer: Producer,
        txn_topic: str,
        txn_queue: int | None,
        fence: Callable[[], tuple[str, str]] | None = None,
    ) -> None:
        self.task_id = task_id
        self.queue = queue
        self.group = group
        self.broker = broker
        self.producer = producer
        self.txn_topic = txn_topic
        self.txn_queue = txn_queue
        self.exactly_once = txn_queue is not None
        #: The task's fence, when its commits are one atomic, fenced broker transaction.
        self.fence = fence if hasattr(broker, "transaction") else None
        #: Where the stores' changelog records go: the broker, or (exactly-once) the
        #: transaction being built.
        self.log: ChangelogLog = TransactionLog(broker) if self.exactly_once else broker
        #: The input offsets committed last.
        self.committed: dict[str, int] = {}
        self.seq = 0  # of the last transaction
        #: Per told shuffle topic, the time the last transaction says the task told it
        #: (set by :meth:`recover`; empty: none, or one written before it was kept).
        self.restored_told: dict[str, int] = {}
        self._commits = 0

    def begin(
        self,
        timestamp: int,
        stores: Iterable[MeteredStore],
        positions: dict[str, int],
        times: tuple[int, int],
        tx: Any = None,
        told: dict[str, int] | None = None,
    ) -> Commit | None:
        """First phase: flush the stores (their changelog records get ``timestamp``);
        at-least-once, write everything; exactly-once, append the transaction (not yet
        durable), or with a fence, add it to ``tx``, the worker's broker transaction
        (applied by ``commit_tasks`` after every task's first phase; without ``tx``,
        apply it in a transaction of its own now). None when there
        is nothing to commit. ``times`` is where the task's time got, ``told`` the
        time it told each told shuffle (a new owner goes on from there)."""
        # A store flushed earlier (Task.prepare_commit) has changes pending, not dirty.
        changed = [store for store in stores if store.flush(timestamp) or store.pending]
        if not self.exactly_once:
            written = self.producer.flush()
            for store in changed:
                store.send()
                store.write()
            return Commit(None, 0, written)
        outputs: list[tuple[tuple[str, int], TxnColumns]] = list(self.producer.take().items())
        for store in changed:
            store.send()  # into the transaction log, in store order
        assert isinstance(self.log, TransactionLog)
        outputs += self.log.take()
        offsets = dict(positions)
        if not outputs and offsets == self.committed:
            return None
        self.seq += 1
        told = dict(told or {})
        if self.fence is not None:
            if tx is not None:
                return self._commit_atomic(timestamp, outputs, offsets, times, told, changed, tx)
            broker: Any = self.broker
            with broker.transaction() as own:  # a commit of its own, applied now
                c = self._commit_atomic(timestamp, outputs, offsets, times, told, changed, own)
            self._end_atomic(c)
            return Commit(None, 0, c.written)
        # Each append is encoded once, as the frame payload it becomes, marker included:
        # applying the transaction (now or on recovery) writes those bytes as they are.
        marker = txn_marker(self.task_id, self.seq)
        appends = []
        for (topic, q), (timestamps, keys, values, headers) in outputs:
            headers = list(headers)
            headers[0] = (*headers[0], marker)
            encoded = encode_column_batch(timestamps, keys, values, headers)
            assert encoded is not None
            appends.append(Append(topic, q, self.broker.end_offset(topic, q), *encoded))
        txn = Transaction(self.task_id, self.seq, offsets, tuple(appends), times, told)
        assert self.txn_queue is not None
        record = [(timestamp, None, txn.encode(), ())]
        at = self.broker.append(self.txn_topic, self.txn_queue, record)
        return Commit(txn, at, txn.written)

    def _commit_atomic(
        self,
        timestamp: int,
        outputs: list[tuple[tuple[str, int], TxnColumns]],
        offsets: dict[str, int],
        times: tuple[int, int],
        told: dict[str, int],
        stores: list[MeteredStore],
        tx: Any,
    ) -> Commit:
        """Everything of the commit into the worker's fenced broker transaction ``tx``
        (this task's fence joins it); the stores are written at :meth:`end`, once it is
        applied (local: rebuilt from the changelog if the process dies before)."""
        assert self.fence is not None and self.txn_queue is not None and tx is not None
        txn = Transaction(self.task_id, self.seq, offsets, (), times, told)
        tx.add_fence(*self.fence())
        for (topic, q), columns in outputs:
            tx.append_columns(topic, q, *columns)
        tx.append(self.txn_topic, self.txn_queue, [(timestamp, None, txn.encode(), ())])
        for topic, pos in offsets.items():
            if self.committed.get(topic) != pos:
                tx.commit(self.group, topic, self.queue, pos)
        return Commit(None, 0, [q for q, _ in outputs], tx, offsets, stores)

    def _end_atomic(self, c: Commit) -> None:
        """After the worker's transaction was applied: the stores, and now and then a
        purge of the task's transaction queue."""
        assert c.offsets is not None and self.txn_queue is not None
        maybe_crash("txn-written")
        self.committed = dict(c.offsets)
        assert isinstance(self.log, TransactionLog)
        self.log.known_ends(c.tx.ends())  # the changelogs' ends, without asking
        for store in c.stores:
            store.write()
        self._commits += 1
        if self._commits % PURGE_EVERY == 0:
            at = self.broker.end_offset(self.txn_topic, self.txn_queue) - 1
            self.broker.purge(self.txn_topic, self.txn_queue, at)

    def apply(self, c: Commit) -> None:
        """Second phase, once the transaction is durable (the commit point): write its
        outputs (made durable before the third phase)."""
        if c.txn is not None:
            maybe_crash("txn-written")
            self._append_outputs(c.txn, redo=False)

    def offset_commits(
        self, c: Commit, positions: dict[str, int]
    ) -> list[tuple[str, str, int, int]]:
        """The offsets the third phase of ``c`` commits, as (group, topic, queue,
        offset): those that moved (the atomic path committed its own)."""
        if c.offsets is not None:
            return []
        offsets = positions if c.txn is None else c.txn.offsets
        return [
            (self.group, topic, self.queue, pos)
            for topic, pos in offsets.items()
            if self.committed.get(topic) != pos  # idle queues cost nothing
        ]

    def end(self, c: Commit, stores: Iterable[MeteredStore], positions: dict[str, int]) -> None:
        """Third phase, once the outputs are durable and the caller committed the
        :meth:`offset_commits` (``commit_tasks``, every task's at once): write the
        stores."""
        if c.offsets is not None:
            self._end_atomic(c)
            return
        if c.txn is None:
            self.committed = dict(positions)
            return
        self.committed = dict(c.txn.offsets)
        self._commits += 1
        if self._commits % PURGE_EVERY == 0:
            assert self.txn_queue is not None
            self.broker.purge(self.txn_topic, self.txn_queue, c.at)
        for store in stores:
            store.write()

    def recover(self) -> tuple[int, int] | None:
        """Finish the last transaction if the previous owner died while applying it;
        returns where the task's time had got then (None: no transaction yet), and
        keeps the time it had told each told shuffle (:attr:`restored_told`)."""
        assert self.txn_queue is not None
        end = self.broker.end_offset(self.txn_topic, self.txn_queue)
        if end <= self.broker.start_offset(self.txn_topic, self.txn_queue):
            return None
        (last,) = self.broker.read(self.txn_topic, self.txn_queue, end - 1, 1)
        try:
            txn = Transaction.decode(last.value or b"")
        except TransactionFormatError as e:
            raise SerdeError(
                f"task {self.task_id}: unreadable transaction record at "
                f"{self.txn_topic}[{self.txn_queue}]@{last.offset}: {e}"
            ) from None
        self.seq = txn.seq
        committed = {t: self.broker.committed(self.group, t, self.queue) for t in txn.offsets}
        if committed != txn.offsets:
            self._append_outputs(txn, redo=True)
            self.broker.flush()
            self._commit_offsets(txn.offsets)
        self.broker.purge(self.txn_topic, self.txn_queue, end - 1)
        self.restored_told = dict(txn.told)
        return txn.times

    def _append_outputs(self, txn: Transaction, redo: bool) -> None:
        marker = txn.marker
        for topic, q, hint, payload, count, max_ts in txn.appends:
            if redo and (end := self.broker.end_offset(topic, q)) < hint:
                # The queue held ``hint`` records when the transaction was written:
                # some are gone, and appending again would not bring them back.
                raise LostStateError(
                    f"task {self.task_id}: {topic}[{q}] ends at offset {end}, below offset "
                    f"{hint} where its last transaction "
                    f"({self.txn_topic}[{self.txn_queue}], seq {txn.seq}) appended: "
                    f"records {topic}[{q}]@{end}..{hint - 1} are gone (the log was cut or "
                    f"lost its tail); {REBUILD_ADVICE}",
                    topic=topic, queue=q, offset=end,
                )  # fmt: skip
            if redo and self._has_marker(topic, q, hint, marker):
                continue
            self.broker.append_encoded(topic, q, payload, count, max_ts)
            maybe_crash("txn-applying")

    def _has_marker(self, topic: str, q: int, hint: int, marker: tuple[str, bytes]) -> bool:
        pos = max(hint, self.broker.start_offset(topic, q))
        while True:
            records = self.broker.read(topic, q, pos, 10_000)
            if not records:
                return False
            for r in records:
                if marker in r.headers:
                    return True
            pos = records[-1].offset + 1

    def _commit_offsets(self, offsets: dict[str, int]) -> None:
        self.broker.commit_many([(self.group, t, self.queue, pos) for t, pos in offsets.items()])
        self.committed = dict(offsets)


class KeptTimes:
    """At least once, the time a task told each told shuffle, kept with its offsets
    (under :func:`~rstreams.runtime.engine.operators.watermarks.producer_time_group`, as
    the offset of the topic's queue of the task's number): its next owner goes on from
    there. (Exactly once keeps them in the task's transactions.)"""

    def __init__(self, broker: Broker, group: str, queue: int, told: dict[str, int]) -> None:
        """Raise ``told`` (per told topic, the time told so far) to what an earlier owner
        kept."""
        self.broker, self.group, self.queue = broker, group, queue
        kept = broker.group_offsets(group)
        for topic in told:
            told[topic] = max(told[topic], kept.get((topic, queue), NO_TIME))
        self.kept = dict(told)

    def commit(self, told: dict[str, int]) -> None:
        """Keep the times of ``told`` that moved since the last commit (one write)."""
        moved = [
            (self.group, topic, self.queue, time)
            for topic, time in told.items()
            if time > max(self.kept[topic], -1)
        ]
        if moved:
            self.broker.commit_many(moved)
            self.kept.update((topic, time) for _, topic, _, time in moved)
