"""Pulsar pure logic: sticky-key hash, Key_Shared selectors and failover selection."""

from __future__ import annotations

import doctest
import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rstreams.runtime.subscriptions.batching as batching_module
import rstreams.runtime.subscriptions.failover as failover_module
import rstreams.runtime.subscriptions.hashing as hashing_module
import rstreams.runtime.subscriptions.selectors as selectors_module
import rstreams.runtime.subscriptions.subscription as subscription_module
from rstreams.runtime.subscriptions import (
    AutoSplitHashRangeSelector,
    ConsistentHashingSelector,
    ConsumerAssignError,
    StickyHashRangeSelector,
    failover_active_consumer,
    failover_takeover_order,
    range_slot,
    sticky_key_hash,
)

FAST = settings(max_examples=50, deadline=None)


@pytest.mark.parametrize(
    "module",
    [hashing_module, selectors_module, failover_module, subscription_module, batching_module],
    ids=lambda m: m.__name__,
)
def test_doctests(module) -> None:
    assert doctest.testmod(module).failed == 0


def test_docs_examples_run() -> None:
    text = (Path(__file__).parents[2] / "docs" / "groups.md").read_text(encoding="utf-8")
    # (the block marked ``snippet: redis`` needs a server: tests/redis runs it)
    found = re.findall(r"(<!-- snippet: redis[^\n]*-->\n)?```python\n(.*?)```", text, re.S)
    blocks = [code for marker, code in found if not marker]
    assert len(blocks) >= 4
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(block, namespace)


# -- sticky key hash ----------------------------------------------------------------------


def murmur3_x86_32(data: bytes, seed: int = 0) -> int:
    """Reference Murmur3 x86 32-bit (as Pulsar's Murmur3_32Hash.makeHash0), unsigned."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    def mix_k1(k1: int) -> int:
        return (rotl((k1 * c1) & mask, 15) * c2) & mask

    h1 = seed
    n = len(data) // 4 * 4
    for i in range(0, n, 4):
        h1 ^= mix_k1(int.from_bytes(data[i : i + 4], "little"))
        h1 = (rotl(h1, 13) * 5 + 0xE6546B64) & mask
    k1 = 0
    for i, b in enumerate(data[n:]):
        k1 ^= b << (8 * i)
    h1 ^= mix_k1(k1)
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & mask
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & mask
    h1 ^= h1 >> 16
    return h1


def test_sticky_key_hash_known_values() -> None:
    assert sticky_key_hash(b"") == 0
    assert sticky_key_hash("hello") == 0x248BFA47  # standard Murmur3_32("hello", seed 0)
    assert sticky_key_hash("héllo") == sticky_key_hash("héllo".encode())
    with pytest.raises(TypeError, match="bytes or str"):
        sticky_key_hash(42)  # type: ignore[arg-type]


@FAST
@given(st.binary(max_size=40) | st.text(max_size=20))
def test_sticky_key_hash_is_masked_murmur3(key) -> None:
    data = key.encode() if isinstance(key, str) else key
    assert sticky_key_hash(key) == murmur3_x86_32(data) & 0x7FFFFFFF


def test_range_slot_never_zero() -> None:
    zero = next(k for k in (f"k{i}" for i in itertools.count()) if sticky_key_hash(k) % 4 == 0)
    assert range_slot(zero, 4) == 1  # slot 0 means "no hash" in Pulsar 4.x
    assert all(1 <= range_slot(f"k{i}", 4) <= 3 for i in range(100))


# -- auto split -----------------------------------------------------------------------------


def test_auto_split_four_consumers() -> None:
    s = AutoSplitHashRangeSelector()
    s.add_consumer("c1")
    assert s.ranges() == {"c1": [(0, 65536)]}
    s.add_consumer("c2")
    assert s.ranges() == {"c2": [(0, 32768)], "c1": [(32769, 65536)]}
    s.add_consumer("c3")  # a tie: the lower range (c2's) is split
    s.add_consumer("c4")  # c1's range is the biggest
    assert s.ranges() == {
        "c3": [(0, 16384)],
        "c2": [(16385, 32768)],
        "c4": [(32769, 49152)],
        "c1": [(49153, 65536)],
    }
    assert [s.select_slot(x) for x in (1, 16384, 16385, 40000, 65535)] == [
        "c3",
        "c3",
        "c2",
        "c4",
        "c1",
    ]
    s.remove_consumer("c2")  # the right neighbour absorbs its range
    assert s.ranges() == {"c3": [(0, 16384)], "c4": [(16385, 49152)], "c1": [(49153, 65536)]}
    s.remove_consumer("c1")  # the top range goes to its left neighbour
    assert s.ranges() == {"c3": [(0, 16384)], "c4": [(16385, 65536)]}
    s.remove_consumer("nobody")  # unknown: nothing happens (as in Pulsar)
    s.remove_consumer("c3")
    s.remove_consumer("c4")
    assert s.ranges() == {} and s.select("k") is None


def test_auto_split_exhausted_and_validation() -> None:
    s = AutoSplitHashRangeSelector(range_size=4)
    for c in "abcd":
        s.add_consumer(c)
    assert s.ranges() == {"c": [(0, 1)], "b": [(2, 2)], "d": [(3, 3)], "a": [(4, 4)]}
    with pytest.raises(ConsumerAssignError, match="no hash range left"):
        s.add_consumer("e")
    with pytest.raises(ConsumerAssignError, match="already added"):
        s.add_consumer("a")
    with pytest.raises(ValueError, match="power of 2"):
        AutoSplitHashRangeSelector(1000)


def test_auto_split_select_uses_slot() -> None:
    s = AutoSplitHashRangeSelector()
    for c in ["c1", "c2", "c3", "c4"]:
        s.add_consumer(c)
    for i in range(200):
        key = f"key-{i}"
        slot = (sticky_key_hash(key) % 65536) or 1
        assert s.slot(key) == slot
        owner = [c for c, rs in s.ranges().items() if any(lo <= slot <= hi for lo, hi in rs)]
        assert [s.select(key)] == owner


@FAST
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), max_size=30))
def test_auto_split_ranges_always_tile(ops) -> None:
    s = AutoSplitHashRangeSelector()
    live: set[str] = set()
    for add, i in ops:
        c = f"c{i}"
        if add and c not in live:
            s.add_consumer(c)
            live.add(c)
        elif not add:
            s.remove_consumer(c)
            live.discard(c)
    spans = sorted(r for rs in s.ranges().values() for r in rs)
    assert set(s.ranges()) == live
    if live:
        assert spans[0][0] == 0 and spans[-1][1] == 65536
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
        assert all(len(rs) == 1 for rs in s.ranges().values())


# -- consistent hashing ---------------------------------------------------------------------


def test_consistent_hashing_matches_pulsar_4x_vector() -> None:
    # ConsistentHashingStickyKeyConsumerSelectorTest.testGetConsumerKeyHashRanges (Pulsar 4.x).
    s = ConsistentHashingSelector(3)
    for c in ["consumer1", "consumer2", "consumer3"]:
        s.add_consumer(c)
    assert s.ranges() == {
        "consumer1": [(14359, 18366), (29991, 39817), (52980, 60442)],
        "consumer2": [(1, 6668), (39818, 52979), (60443, 63679), (65184, 65535)],
        "consumer3": [(6669, 14358), (18367, 29990), (63680, 65183)],
    }


def test_consistent_hashing_points_and_slots() -> None:
    s = ConsistentHashingSelector(5)
    s.add_consumer("a")
    expected = sorted({sticky_key_hash(f"a\0{0}\0{i}") % 65535 + 1 for i in range(5)})
    assert s._keys == expected
    assert s.slot("k") == sticky_key_hash("k") % 65535 + 1
    assert s.select_slot(expected[-1] + 1 if expected[-1] < 65535 else 1) == "a"  # wraps


class Named:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Named({self.name!r}@{id(self):x})"


def test_consistent_hashing_same_name_gets_free_index() -> None:
    s: ConsistentHashingSelector[Named] = ConsistentHashingSelector(10)
    x, y, z = Named("worker"), Named("worker"), Named("worker")
    s.add_consumer(x)
    s.add_consumer(y)
    assert s._index_of == {x: 0, y: 1}
    s.remove_consumer(x)
    s.add_consumer(z)  # the smallest free index: 0 again, so z takes over x's points
    assert s._index_of[z] == 0
    owners = {owner for owner in (s._ring[k].selected for k in s._keys)}
    assert owners == {y, z}


def colliding_names(points: int, count: int) -> list[str]:
    """``count`` names whose single point (index 0) lands on the same slot."""
    seen: dict[int, list[str]] = {}
    for i in itertools.count():
        name = f"n{i}"
        slot = ConsistentHashingSelector(points).point_slots(name)[0]
        seen.setdefault(slot, []).append(name)
        if len(seen[slot]) == count:
            return seen[slot]
    raise AssertionError  # pragma: no cover


def test_consistent_hashing_collision_first_added_keeps_point() -> None:
    a, b, c = colliding_names(1, 3)
    s = ConsistentHashingSelector(1)
    for name in (a, b, c):
        s.add_consumer(name)
    assert s.ranges() == {a: [(1, 65535)]}  # one point, held by the first added
    s.remove_consumer(a)
    assert s.select("anything") == b  # promoted in the order they were added
    s.add_consumer(a)  # re-added: now it is the last in line
    s.remove_consumer(b)
    assert s.select("anything") == c
    s.remove_consumer(c)
    assert s.select("anything") == a
    s.remove_consumer(a)
    assert s.select("anything") is None and s.ranges() == {}


@FAST
@given(
    names=st.lists(
        st.sampled_from([f"c{i}" for i in range(8)]), min_size=1, max_size=6, unique=True
    ),
    newcomer=st.sampled_from(["x", "y", "c0"]),
)
def test_consistent_hashing_minimal_movement(names: list[str], newcomer: str) -> None:
    keys = [f"key-{i}" for i in range(300)]
    s = ConsistentHashingSelector(20)
    for n in names:
        s.add_consumer(n)
    before = {k: s.select(k) for k in keys}
    if newcomer not in names:
        s.add_consumer(newcomer)
        after = {k: s.select(k) for k in keys}
        assert all(after[k] in (before[k], newcomer) for k in keys)
        s.remove_consumer(newcomer)
        assert {k: s.select(k) for k in keys} == before
    leaver = names[0]
    s.remove_consumer(leaver)
    after = {k: s.select(k) for k in keys}
    assert all(after[k] == before[k] for k in keys if before[k] != leaver)
    spans = sorted(r for rs in s.ranges().values() for r in rs)
    if spans:
        assert spans[0][0] == 1 and spans[-1][1] == 65535
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
        for lo, hi in spans:
            owner = s.select_slot(lo)
            assert s.select_slot(hi) == owner and (lo, hi) in s.ranges()[owner]


# -- sticky -----------------------------------------------------------------------------------


def test_sticky_ranges_and_gaps() -> None:
    s = StickyHashRangeSelector()
    s.add_consumer("a", [(0, 99), (200, 299)])
    s.add_consumer("b", [(100, 149)])
    assert s.ranges() == {"a": [(0, 99), (200, 299)], "b": [(100, 149)]}
    assert [s.select_slot(x) for x in (0, 99, 100, 149, 150, 199, 200, 299, 300)] == [
        "a",
        "a",
        "b",
        "b",
        None,
        None,
        "a",
        "a",
        None,
    ]
    key = next(f"k{i}" for i in itertools.count() if 100 <= range_slot(f"k{i}") <= 149)
    assert s.slot(key) == range_slot(key) and s.select(key) == "b"
    s.remove_consumer("b")
    assert s.select(key) is None
    s.add_consumer("c", [(120, 160)])  # b's old range is free again
    assert s.select(key) == "c"


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([], "gave no hash ranges"),
        (None, "must give its hash ranges"),
        ([(5, 4)], r"\[5, 4\] is empty"),
        ([(0, 65536)], "outside"),
        ([(-1, 3)], "outside"),
        ([(10, 20), (20, 30)], "its own hash ranges .* overlap"),
        ([(50, 60), (95, 105)], r"overlaps \[100, 149\] of consumer 'b'"),
        ([(149, 149)], "overlaps"),
        ([(0, 65535)], "overlaps"),
    ],
)
def test_sticky_rejects(ranges, message: str) -> None:
    s = StickyHashRangeSelector()
    s.add_consumer("b", [(100, 149)])
    with pytest.raises(ConsumerAssignError, match=message):
        s.add_consumer("new", ranges)
    assert "new" not in s
    with pytest.raises(ConsumerAssignError, match="already added"):
        s.add_consumer("b", [(0, 1)])


# -- failover ---------------------------------------------------------------------------------


def test_failover_active_consumer() -> None:
    cs = [("c2", 0), ("c1", 0), ("c3", 0)]
    assert [failover_active_consumer(p, cs) for p in range(6)] == ["c1", "c2", "c3"] * 2
    # Only the highest priority (lowest level) consumers are active.
    cs = [("a", 1), ("b", 0), ("c", 0), ("d", 2)]
    assert [failover_active_consumer(p, cs) for p in range(4)] == ["b", "c", "b", "c"]
    # Names sort as strings: "c10" < "c2".
    assert failover_active_consumer(0, [("c2", 0), ("c10", 0)]) == "c10"
    assert failover_takeover_order(1, [("a", 0), ("b", 0), ("c", 1), ("d", 1)]) == [
        "b",
        "a",
        "d",  # 2 left at level 1: queue 1 -> sorted[1 % 2]
        "c",
    ]
    with pytest.raises(ValueError, match="at least one consumer"):
        failover_active_consumer(0, [])
    with pytest.raises(ValueError, match="queue_index"):
        failover_active_consumer(-1, [("a", 0)])


@FAST
@given(
    st.lists(st.tuples(st.text("ab1", min_size=1, max_size=3), st.integers(0, 2)), min_size=1),
    st.integers(0, 50),
)
def test_failover_active_is_a_top_priority_consumer(consumers, queue: int) -> None:
    name = failover_active_consumer(queue, consumers)
    top = min(p for _, p in consumers)
    tops = sorted(n for n, p in consumers if p == top)
    assert name == tops[queue % len(tops)]
