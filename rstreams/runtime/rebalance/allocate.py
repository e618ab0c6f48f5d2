"""Allocation strategies with RocketMQ's Java client semantics."""

from __future__ import annotations

from collections.abc import Sequence

import attrs


@attrs.frozen(order=True)
class MessageQueue:
    """A queue of a topic on a broker, ordered by (topic, broker, queue_id).

    >>> str(MessageQueue("t", "b", 0))
    'MessageQueue [topic=t, brokerName=b, queueId=0]'
    """

    topic: str
    broker: str
    queue_id: int

    def __str__(self) -> str:
        return (
            f"MessageQueue [topic={self.topic}, brokerName={self.broker}, queueId={self.queue_id}]"
        )


class AllocateStrategy:
    """Base: validate like RocketMQ's AbstractAllocateMessageQueueStrategy."""

    name = "strategy"

    def allocate(
        self,
        consumer_group: str,
        current_id: str,
        queues: Sequence[MessageQueue],
        consumer_ids: Sequence[str],
    ) -> list[MessageQueue]:
        if not current_id:
            raise ValueError("current consumer id is empty")
        if not queues:
            raise ValueError("the queue list to allocate is empty")
        if not consumer_ids:
            raise ValueError("the consumer id list is empty")
        if current_id not in consumer_ids:
            return []
        return self._allocate(consumer_group, current_id, sorted(queues), sorted(consumer_ids))

    def _allocate(
        self, group: str, current_id: str, queues: list[MessageQueue], consumers: list[str]
    ) -> list[MessageQueue]:
        raise NotImplementedError


class AllocateAveragely(AllocateStrategy):
    """Contiguous blocks; the first ``Q % C`` members get one queue more.

    >>> qs = [MessageQueue("t", "b", i) for i in range(5)]
    >>> [q.queue_id for q in AllocateAveragely().allocate("g", "c1", qs, ["c0", "c1"])]
    [3, 4]
    """

    name = "averagely"

    def _allocate(
        self, group: str, current_id: str, queues: list[MessageQueue], consumers: list[str]
    ) -> list[MessageQueue]:
        index = consumers.index(current_id)
        q, c = len(queues), len(consumers)
        mod = q % c
        average = 1 if q <= c else q // c + (1 if mod > 0 and index < mod else 0)
        start = index * average if mod > 0 and index < mod else index * average + mod
        n = min(average, q - start)
        return queues[start : start + n] if n > 0 else []
