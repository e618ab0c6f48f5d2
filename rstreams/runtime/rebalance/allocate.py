"""Allocation strategies with RocketMQ's Java client semantics.

Every member of a consumer group calls ``strategy.allocate(group, my_id, queues, members)``
with the same view and gets its own share; the shares of all members cover every queue
exactly once (except :class:`AllocateByConfig` and :class:`AllocateByMachineRoom`, which
are partial by design). Members agree without talking because the view is sorted the same
way everywhere: queues by (topic, broker, queue_id), member ids as plain strings
(``"c10" < "c2"``), both in Java's ``String.compareTo`` order (UTF-16 code units), which
only differs from Python's for characters outside the Basic Multilingual Plane.

>>> qs = [MessageQueue("t", "b", i) for i in range(8)]
>>> [q.queue_id for q in AllocateAveragelyByCircle().allocate("g", "c1", qs, ["c0", "c1", "c2"])]
[1, 4, 7]
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence

import attrs


def java_string_key(s: str) -> bytes:
    """A sort key that orders strings like Java's ``String.compareTo``.

    Java compares UTF-16 code units; big-endian UTF-16 bytes compare the same way.

    >>> sorted(["\\uffff", "\\U00010000"]) == ["\\uffff", "\\U00010000"]
    True
    >>> sorted(["\\uffff", "\\U00010000"], key=java_string_key) == ["\\U00010000", "\\uffff"]
    True
    """
    return s.encode("utf-16-be", "surrogatepass")


@attrs.frozen(order=True)
class MessageQueue:
    """A queue of a topic on a broker, ordered by (topic, broker, queue_id).

    >>> str(MessageQueue("t", "b", 0))
    'MessageQueue [topic=t, brokerName=b, queueId=0]'
    >>> MessageQueue("t", "b", 2) < MessageQueue("t", "b", 10) < MessageQueue("t", "c", 0)
    True
    """

    topic: str = attrs.field(order=java_string_key)
    broker: str = attrs.field(order=java_string_key)
    queue_id: int

    def __str__(self) -> str:
        # RocketMQ's MessageQueue.toString(); AllocateConsistentHash hashes exactly this text.
        return (
            f"MessageQueue [topic={self.topic}, brokerName={self.broker}, queueId={self.queue_id}]"
        )


class AllocateStrategy:
    """Base: validate like RocketMQ's AbstractAllocateMessageQueueStrategy, then sort.

    RocketMQ's RebalanceImpl sorts both lists before calling a strategy; here the strategy
    sorts them itself, so callers may pass them in any order.
    """

    name = "strategy"
    #: what RocketMQ's ``getName()`` returns for the same strategy
    rocketmq_name = "STRATEGY"

    def allocate(
        self,
        consumer_group: str,
        current_id: str,
        queues: Sequence[MessageQueue],
        consumer_ids: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues ``current_id`` should consume, in queue order.

        Raises ValueError when ``current_id``, ``queues`` or ``consumer_ids`` is empty;
        returns ``[]`` when ``current_id`` is not one of ``consumer_ids``.
        """
        if not current_id:
            raise ValueError(
                f"{type(self).__name__}: the current consumer id is empty "
                f"(group {consumer_group!r}); every member needs a non-empty id"
            )
        if not queues:
            raise ValueError(
                f"{type(self).__name__}: the queue list to allocate is empty "
                f"(group {consumer_group!r}); is the topic created?"
            )
        if not consumer_ids:
            raise ValueError(
                f"{type(self).__name__}: the consumer id list is empty "
                f"(group {consumer_group!r}); it must contain at least the current member"
            )
        if current_id not in consumer_ids:
            return []
        return self._allocate(
            consumer_group,
            current_id,
            sorted(queues),
            sorted(consumer_ids, key=java_string_key),
        )

    def _allocate(
        self, group: str, current_id: str, queues: list[MessageQueue], consumers: list[str]
    ) -> list[MessageQueue]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AllocateAveragely(AllocateStrategy):
    """Contiguous blocks; the first ``Q % C`` members get one queue more (RocketMQ "AVG").

    >>> qs = [MessageQueue("t", "b", i) for i in range(5)]
    >>> [q.queue_id for q in AllocateAveragely().allocate("g", "c1", qs, ["c0", "c1"])]
    [3, 4]
    """

    name = "averagely"
    rocketmq_name = "AVG"

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


class AllocateAveragelyByCircle(AllocateStrategy):
    """Deal queues like cards: queue ``i`` goes to member ``i % C`` (RocketMQ "AVG_BY_CIRCLE").

    >>> qs = [MessageQueue("t", "b", i) for i in range(5)]
    >>> [q.queue_id for q in AllocateAveragelyByCircle().allocate("g", "c0", qs, ["c0", "c1"])]
    [0, 2, 4]
    """

    name = "averagely_by_circle"
    rocketmq_name = "AVG_BY_CIRCLE"

    def _allocate(
        self, group: str, current_id: str, queues: list[MessageQueue], consumers: list[str]
    ) -> list[MessageQueue]:
        return queues[consumers.index(current_id) :: len(consumers)]


def md5_hash(key: str) -> int:
    """RocketMQ's default ring hash: the first 4 bytes of MD5(UTF-8 ``key``), big-endian.

    >>> md5_hash("c0-0") == int.from_bytes(hashlib.md5(b"c0-0").digest()[:4], "big")
    True
    """
    # Java's getBytes() turns an unpaired surrogate into '?'; so does errors="replace".
    return int.from_bytes(hashlib.md5(key.encode("utf-8", "replace")).digest()[:4], "big")


class ConsistentHashRing:
    """RocketMQ's ConsistentHashRouter: virtual nodes on a sorted ring of hashes.

    Node ``n`` gets virtual nodes ``f"{n}-{i}"``; adding a node that already has virtual
    nodes continues their numbering. On a hash collision the node added last wins.
    A key routes to the first virtual node at or after its hash, wrapping to the first.

    >>> ring = ConsistentHashRing(["a", "b"], 3)
    >>> ring.route("x") in {"a", "b"}
    True
    """

    def __init__(
        self,
        nodes: Iterable[str] = (),
        virtual_nodes: int = 10,
        hash_function: Callable[[str], int] = md5_hash,
    ) -> None:
        self.hash_function = hash_function
        self._owner: dict[int, str] = {}
        self._replicas: Counter[str] = Counter()
        self._keys: list[int] = []  # sorted view of _owner, rebuilt lazily
        self._dirty = False
        for node in nodes:
            self.add_node(node, virtual_nodes)

    def add_node(self, node: str, virtual_nodes: int) -> None:
        if virtual_nodes < 0:
            raise ValueError(f"virtual_nodes must be >= 0; got {virtual_nodes}")
        existing = self._replicas[node]
        for i in range(virtual_nodes):
            h = self.hash_function(f"{node}-{i + existing}")
            old = self._owner.get(h)
            if old is not None:
                self._replicas[old] -= 1
            self._owner[h] = node
            self._replicas[node] += 1
        self._dirty = True

    def remove_node(self, node: str) -> None:
        self._owner = {h: n for h, n in self._owner.items() if n != node}
        self._replicas.pop(node, None)
        self._dirty = True

    def route(self, key: str) -> str | None:
        """The node owning ``key``: the first ring key >= hash(key), else the first key."""
        if not self._owner:
            return None
        if self._dirty:
            self._keys = sorted(self._owner)
            self._dirty = False
        i = bisect.bisect_left(self._keys, self.hash_function(key))
        return self._owner[self._keys[i if i < len(self._keys) else 0]]

    def points(self) -> list[tuple[int, str]]:
        """(hash, node) for every virtual node, in ring order."""
        return sorted(self._owner.items())


class AllocateConsistentHash(AllocateStrategy):
    """A ring of ``virtual_nodes`` points per member; each queue goes to the next point
    clockwise from the hash of ``str(queue)`` (RocketMQ "CONSISTENT_HASH").

    Moves few queues when members come and go: a joining member only takes queues, a
    leaving member's queues are the only ones that move.

    >>> qs = [MessageQueue("t", "b", i) for i in range(4)]
    >>> s = AllocateConsistentHash()
    >>> sorted(q for m in ["a", "b"] for q in s.allocate("g", m, qs, ["a", "b"])) == qs
    True
    """

    name = "consistent_hash"
    rocketmq_name = "CONSISTENT_HASH"

    def __init__(
        self, virtual_nodes: int = 10, hash_function: Callable[[str], int] | None = None
    ) -> None:
        if virtual_nodes < 0:
            raise ValueError(f"virtual_nodes must be >= 0; got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self.hash_function = hash_function or md5_hash

    def ring(self, consumer_ids: Iterable[str]) -> ConsistentHashRing:
        """The ring every member builds from the sorted member list."""
        return ConsistentHashRing(
            sorted(consumer_ids, key=java_string_key), self.virtual_nodes, self.hash_function
        )

    def _allocate(
        self, group: str, current_id: str, queues: list[MessageQueue], consumers: list[str]
    ) -> list[MessageQueue]:
        ring = ConsistentHashRing(consumers, self.virtual_nodes, self.hash_function)
        return [mq for mq in queues if ring.route(str(mq)) == current_id]

    def __repr__(self) -> str:
        return f"AllocateConsistentHash(virtual_nodes={self.virtual_nodes})"


class AllocateByConfig(AllocateStrategy):
    """A fixed list of queues, whoever asks (RocketMQ "CONFIG").

    >>> mine = [MessageQueue("t", "b", 3)]
    >>> AllocateByConfig(mine).allocate("g", "a", [MessageQueue("t", "b", 0)], ["a"]) == mine
    True
    """

    name = "by_config"
    rocketmq_name = "CONFIG"

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        self.queues = list(queues)

    def _allocate(
        self, group: str, current_id: str, queues: list[MessageQueue], consumers: list[str]
    ) -> list[MessageQueue]:
        return list(self.queues)  # as configured, like RocketMQ: not filtered by ``queues``

    def __repr__(self) -> str:
        return f"AllocateByConfig({self.queues!r})"


def _java_split(s: str, sep: str) -> list[str]:
    """Java's ``String.split(sep)`` for a literal one-character separator:
    trailing empty strings are dropped (``"a@"`` gives ``["a"]``)."""
    parts = s.split(sep)
    if len(parts) == 1:
        return parts  # no match: the whole string, even when empty
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def machine_room_of(broker: str) -> str | None:
    """The room of a broker named ``"room@broker"`` (None when not of that form).

    >>> machine_room_of("hz@broker-a"), machine_room_of("broker-a")
    ('hz', None)
    """
    parts = _java_split(broker, "@")
    return parts[0] if len(parts) == 2 else None


class AllocateByMachineRoom(AllocateStrategy):
    """Only queues of brokers named ``"room@broker"`` with a room in ``rooms``, then
    blocks of ``P // C`` per member plus one leftover queue at ``index + (P // C) * C``
    for the first ``P % C`` members (RocketMQ "MACHINE_ROOM").

    >>> qs = [MessageQueue("t", r + "@b", i) for r in ("hz", "sh") for i in range(3)]
    >>> s = AllocateByMachineRoom({"hz"})
    >>> [(q.broker, q.queue_id) for q in s.allocate("g", "c0", qs, ["c0", "c1"])]
    [('hz@b', 0), ('hz@b', 2)]
    """

    name = "by_machine_room"
    rocketmq_name = "MACHINE_ROOM"

    def __init__(self, rooms: Collection[str]) -> None:
        if isinstance(rooms, str):
            raise TypeError(f"rooms must be a collection of room names; got the string {rooms!r}")
        self.rooms = frozenset(rooms)

    def _allocate(
        self, group: str, current_id: str, queues: list[MessageQueue], consumers: list[str]
    ) -> list[MessageQueue]:
        index = consumers.index(current_id)
        kept = [mq for mq in queues if machine_room_of(mq.broker) in self.rooms]
        c = len(consumers)
        block, rem = divmod(len(kept), c)
        out = kept[block * index : block * index + block]
        if rem > index:
            out.append(kept[index + block * c])
        return out

    def __repr__(self) -> str:
        return f"AllocateByMachineRoom({sorted(self.rooms)!r})"


RoomOf = Callable[["MessageQueue | str"], str]


def room_by_prefix(separator: str = "@") -> RoomOf:
    """A ``room_of`` for :class:`AllocateMachineRoomNearby` reading the room before
    ``separator``: in the broker name for a queue, in the id for a consumer.

    >>> room_of = room_by_prefix("@")
    >>> room_of(MessageQueue("t", "hz@broker-a", 0)), room_of("sh@consumer-1")
    ('hz', 'sh')
    """

    def room_of(x: MessageQueue | str) -> str:
        name = x.broker if isinstance(x, MessageQueue) else x
        return name.split(separator, 1)[0]

    return room_of


class AllocateMachineRoomNearby(AllocateStrategy):
    """Prefer queues in my own machine room (RocketMQ "MACHINE_ROOM_NEARBY").

    The queues of each room are split by ``inner`` among the members in that room; the
    queues of a room with no member at all are split by ``inner`` among all members.
    ``room_of(x)`` names the room of a queue (called with a MessageQueue) or of a
    consumer (called with its id); see :func:`room_by_prefix`.

    >>> qs = [MessageQueue("t", r + "@b", i) for r in ("hz", "sh") for i in range(2)]
    >>> s = AllocateMachineRoomNearby(AllocateAveragely(), room_by_prefix())
    >>> [(q.broker, q.queue_id) for q in s.allocate("g", "hz@c1", qs, ["hz@c1"])]
    [('hz@b', 0), ('hz@b', 1), ('sh@b', 0), ('sh@b', 1)]
    """

    name = "machine_room_nearby"

    def __init__(self, inner: AllocateStrategy, room_of: RoomOf) -> None:
        if inner is None:
            raise TypeError("inner allocation strategy is None")
        if room_of is None:
            raise TypeError("room_of is None; pass a function naming a queue's or consumer's room")
        self.inner = inner
        self.room_of = room_of

    @property
    def rocketmq_name(self) -> str:  # type: ignore[override]
        return f"MACHINE_ROOM_NEARBY-{self.inner.rocketmq_name}"

    def _room(self, x: MessageQueue | str) -> str:
        room = self.room_of(x)
        if not room:
            what = "queue" if isinstance(x, MessageQueue) else "consumer id"
            raise ValueError(f"machine room is empty for {what} {x}; room_of must name a room")
        return room

    def _allocate(
        self, group: str, current_id: str, queues: list[MessageQueue], consumers: list[str]
    ) -> list[MessageQueue]:
        queues_in: dict[str, list[MessageQueue]] = {}
        for mq in queues:
            queues_in.setdefault(self._room(mq), []).append(mq)
        consumers_in: dict[str, list[str]] = {}
        for cid in consumers:
            consumers_in.setdefault(self._room(cid), []).append(cid)

        out: list[MessageQueue] = []
        my_room = self._room(current_id)
        mine = queues_in.pop(my_room, [])
        if mine:
            out += self.inner.allocate(group, current_id, mine, consumers_in[my_room])
        # Rooms in Java TreeMap order; a room without members is shared by everyone.
        for room in sorted(queues_in, key=java_string_key):
            if room not in consumers_in:
                out += self.inner.allocate(group, current_id, queues_in[room], consumers)
        return out

    def __repr__(self) -> str:
        return f"AllocateMachineRoomNearby({self.inner!r}, {self.room_of!r})"


def allocate_by_topic(
    strategy: AllocateStrategy,
    consumer_group: str,
    current_id: str,
    queues: Sequence[MessageQueue],
    consumer_ids: Sequence[str],
) -> list[MessageQueue]:
    """The queues of ``current_id`` when each topic's queues are split on their own, as
    RocketMQ's RebalanceImpl does (one ``allocate`` call per subscribed topic): every
    member gets a share of every topic, not some topics whole. The shares of one topic
    are exactly what ``strategy.allocate`` gives for that topic's queues alone.

    >>> qs = [MessageQueue(t, "b", i) for t in ("t0", "t1") for i in range(4)]
    >>> s = AllocateAveragely()
    >>> [(q.topic, q.queue_id) for q in s.allocate("g", "c1", qs, ["c0", "c1"])]
    [('t1', 0), ('t1', 1), ('t1', 2), ('t1', 3)]
    >>> [(q.topic, q.queue_id) for q in allocate_by_topic(s, "g", "c1", qs, ["c0", "c1"])]
    [('t0', 2), ('t0', 3), ('t1', 2), ('t1', 3)]
    """
    by_topic: dict[str, list[MessageQueue]] = {}
    for mq in queues:
        by_topic.setdefault(mq.topic, []).append(mq)
    if not by_topic:  # let the strategy say why an empty list is wrong
        return strategy.allocate(consumer_group, current_id, queues, consumer_ids)
    out: dict[MessageQueue, None] = {}  # ordered, and once each: AllocateByConfig
    for topic in sorted(by_topic, key=java_string_key):  # returns its list for every topic
        out.update(
            dict.fromkeys(
                strategy.allocate(consumer_group, current_id, by_topic[topic], consumer_ids)
            )
        )
    return list(out)


_BY_NAME: dict[str, type[AllocateStrategy]] = {
    "averagely": AllocateAveragely,
    "averagely_by_circle": AllocateAveragelyByCircle,
    "consistent_hash": AllocateConsistentHash,
}


def get_strategy(name: str) -> AllocateStrategy:
    """A strategy that needs no arguments, by name (also RocketMQ's names: ``"AVG"``...).

    >>> get_strategy("AVG_BY_CIRCLE")
    AllocateAveragelyByCircle()
    """
    for key, factory in _BY_NAME.items():
        if name in (key, factory.rocketmq_name):
            return factory()
    choices = ", ".join(sorted(_BY_NAME))
    raise ValueError(
        f"unknown allocation strategy {name!r}; choose one of {choices} "
        "(by_config, by_machine_room and machine_room_nearby need arguments: build them)"
    )
