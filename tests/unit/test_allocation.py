"""RocketMQ allocation strategies: golden allocations, validation and invariants."""

from __future__ import annotations

import doctest
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rstreams.runtime.rebalance.allocate as allocate_module
from rstreams.runtime.rebalance import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
    AllocateStrategy,
    ConsistentHashRing,
    MessageQueue,
    get_strategy,
    java_string_key,
    room_by_prefix,
)

FAST = settings(max_examples=60, deadline=None)


def qs(n: int, topic: str = "t", broker: str = "b") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def ids(share: list[MessageQueue]) -> list[int]:
    return [q.queue_id for q in share]


def table(strategy: AllocateStrategy, queues, members) -> dict[str, list[int]]:
    return {m: ids(strategy.allocate("g", m, queues, members)) for m in members}


def test_doctests() -> None:
    assert doctest.testmod(allocate_module).failed == 0


# -- averagely ------------------------------------------------------------------------------


def test_averagely_golden() -> None:
    s = AllocateAveragely()
    # Q=10, C=3: mod 1, so c0 gets 4, the others 3, contiguous.
    assert table(s, qs(10), ["c0", "c1", "c2"]) == {
        "c0": [0, 1, 2, 3],
        "c1": [4, 5, 6],
        "c2": [7, 8, 9],
    }
    # Q=8, C=3: mod 2, so c0 and c1 get 3 (starts 0, 3); c2 gets 2 from 2*2 + mod = 6.
    assert table(s, qs(8), ["c0", "c1", "c2"]) == {"c0": [0, 1, 2], "c1": [3, 4, 5], "c2": [6, 7]}
    # Fewer queues than members: one each, the last members get none.
    assert table(s, qs(2), ["c0", "c1", "c2", "c3"]) == {"c0": [0], "c1": [1], "c2": [], "c3": []}
    # Ids sort as plain strings: "c10" < "c2".
    assert table(s, qs(3), ["c2", "c10"]) == {"c2": [2], "c10": [0, 1]}


def test_circle_golden() -> None:
    s = AllocateAveragelyByCircle()
    assert table(s, qs(10), ["c0", "c1", "c2"]) == {
        "c0": [0, 3, 6, 9],
        "c1": [1, 4, 7],
        "c2": [2, 5, 8],
    }
    assert table(s, qs(2), ["a", "b", "c"]) == {"a": [0], "b": [1], "c": []}


def test_queues_sort_by_topic_broker_id() -> None:
    mixed = [
        MessageQueue("t2", "a", 0),
        MessageQueue("t1", "b", 10),
        MessageQueue("t1", "b", 2),
        MessageQueue("t1", "a", 5),
    ]
    got = AllocateAveragelyByCircle().allocate("g", "m", mixed, ["m"])
    assert [(q.topic, q.broker, q.queue_id) for q in got] == [
        ("t1", "a", 5),
        ("t1", "b", 2),
        ("t1", "b", 10),
        ("t2", "a", 0),
    ]


def test_ids_sort_in_java_order() -> None:
    # Java compares UTF-16 code units: U+10000 (a surrogate pair, 0xD800...) < U+FFFF.
    astral, bmp = "\U00010000", "\uffff"
    assert sorted([bmp, astral], key=java_string_key) == [astral, bmp]
    assert table(AllocateAveragely(), qs(2), [bmp, astral]) == {bmp: [1], astral: [0]}
    assert MessageQueue(astral, "b", 0) < MessageQueue(bmp, "b", 0)


@pytest.mark.parametrize(
    "strategy",
    [
        AllocateAveragely(),
        AllocateAveragelyByCircle(),
        AllocateConsistentHash(),
        AllocateByConfig(qs(1)),
        AllocateByMachineRoom({"r"}),
        AllocateMachineRoomNearby(AllocateAveragely(), room_by_prefix()),
    ],
    # type names: a repr holding a function's address differs between xdist workers
    ids=lambda s: type(s).__name__,
)
def test_validation(strategy: AllocateStrategy) -> None:
    with pytest.raises(ValueError, match="current consumer id is empty"):
        strategy.allocate("g", "", qs(1), ["a"])
    with pytest.raises(ValueError, match="queue list to allocate is empty"):
        strategy.allocate("g", "a", [], ["a"])
    with pytest.raises(ValueError, match="consumer id list is empty"):
        strategy.allocate("g", "a", qs(1), [])
    assert strategy.allocate("g", "stranger", qs(3, broker="r@b"), ["r@a"]) == []


def test_str_of_queue() -> None:
    assert str(MessageQueue("t", "b", 0)) == "MessageQueue [topic=t, brokerName=b, queueId=0]"


# -- consistent hash ------------------------------------------------------------------------


def md5_32(s: str) -> int:
    return int.from_bytes(hashlib.md5(s.encode()).digest()[:4], "big")


def reference_consistent_hash(queues, members, vnodes: int) -> dict[MessageQueue, str]:
    """The ring computed independently: later members overwrite colliding points."""
    ring: dict[int, str] = {}
    for m in sorted(members):
        for i in range(vnodes):
            ring[md5_32(f"{m}-{i}")] = m
    keys = sorted(ring)
    out = {}
    for mq in queues:
        h = md5_32(
            f"MessageQueue [topic={mq.topic}, brokerName={mq.broker}, queueId={mq.queue_id}]"
        )
        owner_key = next((k for k in keys if k >= h), keys[0])
        out[mq] = ring[owner_key]
    return out


def test_consistent_hash_matches_independent_md5_ring() -> None:
    members = ["CID-0", "CID-1", "CID-2"]
    queues = qs(10, "topic_test", "brokerName")
    s = AllocateConsistentHash(3)
    expected = reference_consistent_hash(queues, members, 3)
    for m in members:
        assert s.allocate("g", m, queues, members) == [q for q in queues if expected[q] == m]


def test_consistent_hash_golden_table() -> None:
    # Pinned values (the same as the independent ring above, and as docs/groups.md).
    members = ["CID-0", "CID-1", "CID-2"]
    queues = qs(10, "topic_test", "brokerName")
    assert table(AllocateConsistentHash(3), queues, members) == GOLDEN_CONSISTENT_HASH
    assert table(AllocateConsistentHash(), queues, members) == GOLDEN_CONSISTENT_HASH_10


GOLDEN_CONSISTENT_HASH = {"CID-0": [0, 3, 5, 6, 7, 8], "CID-1": [1, 2, 9], "CID-2": [4]}
GOLDEN_CONSISTENT_HASH_10 = {"CID-0": [1, 6, 7], "CID-1": [2, 9], "CID-2": [0, 3, 4, 5, 8]}


def test_md5_hash_is_rocketmq_md5hash() -> None:
    # First 4 digest bytes, big-endian, unsigned (Java: h <<= 8; h |= digest[i] & 0xFF).
    digest = hashlib.md5(b"CID-0-0").digest()
    expected = (digest[0] << 24) | (digest[1] << 16) | (digest[2] << 8) | digest[3]
    assert allocate_module.md5_hash("CID-0-0") == expected
    assert 0 <= allocate_module.md5_hash("x") < 2**32


def test_consistent_hash_custom_hash_function() -> None:
    # A hash putting every virtual node of "b" first and every queue before it.
    def h(s: str) -> int:
        if s.startswith("MessageQueue"):
            return 0
        return 10 if s.startswith("b-") else 20

    s = AllocateConsistentHash(2, hash_function=h)
    assert table(s, qs(3), ["a", "b"]) == {"a": [], "b": [0, 1, 2]}


def test_consistent_hash_ring_details() -> None:
    ring = ConsistentHashRing(["a", "a"], 3)  # a duplicate id continues the numbering
    assert len(ring.points()) == 6
    assert {h for h, _ in ring.points()} == {md5_32(f"a-{i}") for i in range(6)}
    ring.remove_node("a")
    assert ring.route("anything") is None
    # Zero virtual nodes: an empty ring, nobody gets anything (as in RocketMQ).
    assert AllocateConsistentHash(0).allocate("g", "a", qs(3), ["a"]) == []
    with pytest.raises(ValueError, match="virtual_nodes"):
        AllocateConsistentHash(-1)


def test_collision_later_member_wins() -> None:
    s = AllocateConsistentHash(1, hash_function=lambda key: 5 if key.endswith("-0") else 1)
    # Both "a-0" and "b-0" hash to 5: "b", added later (sorted order), owns the point.
    assert table(s, qs(2), ["b", "a"]) == {"a": [], "b": [0, 1]}


# -- by config, machine room, nearby ---------------------------------------------------------


def test_by_config_returns_the_configured_queues() -> None:
    mine = [MessageQueue("t", "b", 7), MessageQueue("t", "b", 3)]
    s = AllocateByConfig(mine)
    assert s.allocate("g", "a", qs(2), ["a", "b"]) == mine
    assert s.allocate("g", "b", qs(2), ["a", "b"]) == mine


def test_by_machine_room_rocketmq_vector() -> None:
    # RocketMQ's AllocateMessageQueueByMachineRoomTest: 5 queues in room1, 5 in room2.
    queues = [MessageQueue("topic", "room1@broker-a", i) for i in range(5)] + [
        MessageQueue("topic", "room2@broker-b", i) for i in range(5, 10)
    ]
    members = ["CID_PREFIX0", "CID_PREFIX1"]
    assert table(AllocateByMachineRoom({"room1"}), queues, members) == {
        "CID_PREFIX0": [0, 1, 4],
        "CID_PREFIX1": [2, 3],
    }


def test_by_machine_room_blocks_and_leftovers() -> None:
    queues = [MessageQueue("t", "hz@b", i) for i in range(7)] + [
        MessageQueue("t", "plain", 0),  # no room: never allocated
        MessageQueue("t", "a@b@c", 0),  # three parts: not "room@broker"
        MessageQueue("t", "hz@b@", 99),  # Java's split drops the trailing empty part
    ]
    got = table(AllocateByMachineRoom({"hz"}), queues, ["c0", "c1", "c2"])
    # kept: hz@b 0..6 and hz@b@ 99 -> 8 queues; blocks of 2, leftovers at 6 and 7 for c0, c1.
    assert got == {"c0": [0, 1, 6], "c1": [2, 3, 99], "c2": [4, 5]}
    with pytest.raises(TypeError, match="collection of room names"):
        AllocateByMachineRoom("hz")


def test_machine_room_nearby() -> None:
    room_of = room_by_prefix("-")
    queues = [
        MessageQueue("t", f"{r}-broker", i) for r in ("IDC1", "IDC2", "IDC3") for i in range(4)
    ]
    members = ["IDC1-c0", "IDC1-c1", "IDC2-c0"]
    s = AllocateMachineRoomNearby(AllocateAveragely(), room_of)
    got = {
        m: [(q.broker, q.queue_id) for q in s.allocate("g", m, queues, members)] for m in members
    }
    # IDC1 and IDC2 queues stay in their rooms; IDC3 has no consumer: shared by all three.
    assert got == {
        "IDC1-c0": [("IDC1-broker", 0), ("IDC1-broker", 1), ("IDC3-broker", 0), ("IDC3-broker", 1)],
        "IDC1-c1": [("IDC1-broker", 2), ("IDC1-broker", 3), ("IDC3-broker", 2)],
        "IDC2-c0": [("IDC2-broker", i) for i in range(4)] + [("IDC3-broker", 3)],
    }
    assert s.rocketmq_name == "MACHINE_ROOM_NEARBY-AVG"
    bad = AllocateMachineRoomNearby(AllocateAveragely(), lambda x: "")
    with pytest.raises(ValueError, match="machine room is empty"):
        bad.allocate("g", "a", qs(1), ["a"])


def test_get_strategy() -> None:
    assert isinstance(get_strategy("AVG"), AllocateAveragely)
    assert isinstance(get_strategy("averagely_by_circle"), AllocateAveragelyByCircle)
    assert isinstance(get_strategy("CONSISTENT_HASH"), AllocateConsistentHash)
    with pytest.raises(ValueError, match="unknown allocation strategy 'nope'"):
        get_strategy("nope")


# -- properties ------------------------------------------------------------------------------

member_sets = st.sets(st.text("abc123-", min_size=1, max_size=4), min_size=1, max_size=9)


def shares(strategy: AllocateStrategy, n: int, members) -> dict[str, list[MessageQueue]]:
    ms = sorted(members)
    return {m: strategy.allocate("g", m, qs(n), ms) for m in ms}


@pytest.mark.parametrize(
    "strategy",
    [AllocateAveragely(), AllocateAveragelyByCircle(), AllocateConsistentHash()],
    ids=repr,
)
@FAST
@given(n=st.integers(1, 40), members=member_sets)
def test_every_queue_exactly_once(strategy: AllocateStrategy, n: int, members) -> None:
    flat = [q for share in shares(strategy, n, members).values() for q in share]
    assert sorted(flat) == qs(n)


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle()], ids=repr)
@FAST
@given(n=st.integers(1, 40), members=member_sets)
def test_balanced_within_one(strategy: AllocateStrategy, n: int, members) -> None:
    sizes = [len(s) for s in shares(strategy, n, members).values()]
    assert max(sizes) - min(sizes) <= 1


@FAST
@given(n=st.integers(1, 40), members=member_sets, newcomer=st.text("xyz9", min_size=1, max_size=3))
def test_consistent_hash_minimal_movement(n: int, members, newcomer: str) -> None:
    s = AllocateConsistentHash()
    before = {q: m for m, share in shares(s, n, members).items() for q in share}
    if newcomer not in members:
        after = {q: m for m, share in shares(s, n, members | {newcomer}).items() for q in share}
        # A joining member only takes queues; nobody else's queues move.
        assert all(after[q] in (before[q], newcomer) for q in before)
    if len(members) > 1:
        leaver = sorted(members)[0]
        after = {q: m for m, share in shares(s, n, members - {leaver}).items() for q in share}
        # Only the leaver's queues move.
        assert all(after[q] == before[q] for q in before if before[q] != leaver)


@FAST
@given(
    n=st.integers(1, 12),
    rooms=st.lists(st.sampled_from(["r1", "r2", "r3"]), min_size=1, max_size=6),
    broker_rooms=st.sets(st.sampled_from(["r1", "r2", "r3"]), min_size=1),
)
def test_nearby_covers_every_queue_once(n: int, rooms: list[str], broker_rooms) -> None:
    members = [f"{r}@c{i}" for i, r in enumerate(rooms)]
    queues = [MessageQueue("t", f"{r}@b", i) for r in sorted(broker_rooms) for i in range(n)]
    s = AllocateMachineRoomNearby(AllocateAveragelyByCircle(), room_by_prefix())
    got = {m: s.allocate("g", m, queues, members) for m in members}
    flat = [q for share in got.values() for q in share]
    assert sorted(flat) == sorted(queues)
    for m, share in got.items():
        for q in share:
            qroom = q.broker.split("@")[0]
            # A room with members keeps its queues to itself.
            assert qroom == m.split("@")[0] or qroom not in rooms
