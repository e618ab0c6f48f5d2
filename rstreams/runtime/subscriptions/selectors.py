"""Key_Shared selectors: which consumer gets the messages of a key (Pulsar 4.x semantics).

A selector maps a key to a *slot* (a small integer derived from :func:`sticky_key_hash`)
and a slot to a consumer. Consumers are any hashable objects: plain names (``str``) or
consumer objects with a ``name`` attribute; two consumer objects may share a name.

All three selectors expose ``add_consumer``, ``remove_consumer``, ``select(key)``
(the consumer, or None), ``slot(key)`` and ``ranges()`` (inclusive slot ranges per
consumer, ascending). Removing a consumer that was never added does nothing (like Pulsar).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from rstreams.errors import ConfigError
from rstreams.runtime.subscriptions.errors import ConsumerAssignError
from rstreams.runtime.subscriptions.hashing import (
    DEFAULT_RANGE_SIZE,
    key_bytes,
    range_slot,
    sticky_key_hash,
)

C = TypeVar("C", bound=Hashable)

Ranges = dict[C, list[tuple[int, int]]]

#: how :meth:`export` names a consumer, and how :meth:`restore` finds it again
Ref = Callable[[Any], int]
Resolve = Callable[[int], Any]


def consumer_name(consumer: Hashable) -> str:
    """The name of a consumer: itself when a ``str``, else its ``name`` attribute."""
    if isinstance(consumer, str):
        return consumer
    name = getattr(consumer, "name", None)
    if not isinstance(name, str):
        raise TypeError(
            f"a consumer must be a str or have a str 'name' attribute; got {consumer!r}"
        )
    return name


class AutoSplitHashRangeSelector(Generic[C]):
    """Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector.

    A sorted map end-key -> consumer: the consumer at end key ``k`` owns slots
    ``(previous key, k]`` (the first one ``[0, k]``). The first consumer gets end key
    ``range_size``; each new consumer splits the biggest range (the lowest one on a tie)
    and takes its lower half. A leaving consumer's range goes to its right neighbour, or
    to its left neighbour when it held the top range.

    >>> s = AutoSplitHashRangeSelector()
    >>> for c in ["c1", "c2", "c3", "c4"]:
    ...     s.add_consumer(c)
    >>> s.ranges()
    {'c3': [(0, 16384)], 'c2': [(16385, 32768)], 'c4': [(32769, 49152)], 'c1': [(49153, 65536)]}
    """

    #: a joining consumer takes keys that others had (so Key_Shared must hold them back)
    moves_keys_on_join = True

    def __init__(self, range_size: int = DEFAULT_RANGE_SIZE) -> None:
        if range_size < 2 or range_size & (range_size - 1):
            raise ValueError(f"range_size must be a power of 2 and >= 2; got {range_size}")
        self.range_size = range_size
        self._ends: list[int] = []  # sorted end keys
        self._owner: dict[int, C] = {}
        self._end_of: dict[C, int] = {}

    def __len__(self) -> int:
        return len(self._end_of)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._end_of

    def add_consumer(self, consumer: C) -> None:
        if consumer in self._end_of:
            raise ConsumerAssignError(f"consumer {consumer_name(consumer)!r} is already added")
        if not self._ends:
            self._put(self.range_size, consumer)
            return
        # The biggest range, scanning upwards; strictly bigger wins, so the first wins ties.
        busiest, slots, lower = self.range_size, 0, 0
        previous = 0
        for end in self._ends:
            if end - previous > slots:
                busiest, slots, lower = end, end - previous, previous
            previous = end
        if busiest - lower <= 1:
            raise ConsumerAssignError(
                f"no hash range left to give consumer {consumer_name(consumer)!r}: "
                f"{len(self._ends)} consumers already own one slot each "
                f"(range_size={self.range_size})"
            )
        self._put(busiest - ((busiest - lower) >> 1), consumer)

    def _put(self, end: int, consumer: C) -> None:
        if end not in self._owner:
            bisect.insort(self._ends, end)
        self._owner[end] = consumer
        self._end_of[consumer] = end

    def remove_consumer(self, consumer: C) -> None:
        end = self._end_of.pop(consumer, None)
        if end is None:
            return
        if end == self.range_size and len(self._ends) > 1:
            # The top range goes to the left neighbour, which moves its end key up.
            lower = self._ends[-2]
            neighbour = self._owner.pop(lower)
            self._ends.remove(lower)
            self._owner[end] = neighbour
            self._end_of[neighbour] = end
        else:
            self._ends.remove(end)
            del self._owner[end]

    def slot(self, key: bytes | str) -> int:
        """The slot of a key: sticky hash % range_size, 0 taken as 1."""
        return range_slot(key, self.range_size)

    def select(self, key: bytes | str) -> C | None:
        return self.select_slot(self.slot(key)) if self._ends else None

    def select_slot(self, slot: int) -> C | None:
        if not self._ends:
            return None
        i = bisect.bisect_left(self._ends, slot)
        return self._owner[self._ends[i]] if i < len(self._ends) else None

    def ranges(self) -> Ranges[C]:
        out: Ranges[C] = {}
        start = 0
        for end in self._ends:
            out.setdefault(self._owner[end], []).append((start, end))
            start = end + 1
        return out

    def export(self, ref: Ref) -> list[Any]:
        """The selector's state as JSON-able data, naming consumers by ``ref`` (its
        layout depends on the order of joins and leaves, so it is saved, not replayed)."""
        return [[end, ref(self._owner[end])] for end in self._ends]

    def restore(self, data: list[Any], resolve: Resolve) -> None:
        """Load what :meth:`export` gave into this empty selector."""
        for end, r in data:
            self._put(int(end), resolve(r))


class _RingPoint(Generic[C]):
    """A point of the consistent-hashing ring: its consumer, and those that collided with
    it, in the order they were added (promoted in that order when the selected leaves)."""

    __slots__ = ("colliding", "selected")

    def __init__(self, selected: C) -> None:
        self.selected: C | None = selected
        self.colliding: list[C] = []

    def remove(self, consumer: C) -> bool:
        """Drop one registration of ``consumer``; True when the point is now empty."""
        if self.selected == consumer:
            self.selected = self.colliding.pop(0) if self.colliding else None
        else:
            self.colliding = [c for c in self.colliding if c != consumer]
        return self.selected is None


class ConsistentHashingSelector(Generic[C]):
    """Pulsar 4.x's ConsistentHashingStickyKeyConsumerSelector.

    Each consumer puts ``points_per_consumer`` points on a ring of slots ``1..65535``, at
    ``hash(f"{name}\\0{idx}\\0{i}") % 65535 + 1`` where ``idx`` is the smallest index not
    used by another live consumer with the same name. A key's slot is its sticky hash
    ``% 65535 + 1``; it goes to the next point clockwise (wrapping to the first). When two
    points collide the consumer added first keeps the point; the others are promoted, in
    the order they were added, when it leaves.

    >>> s = ConsistentHashingSelector(points_per_consumer=100)
    >>> s.add_consumer("a"); s.add_consumer("b")
    >>> s.select("some-key") in {"a", "b"}
    True
    """

    moves_keys_on_join = True
    #: the highest slot; slots are 1..RANGE_MAX (0 means "no hash" in Pulsar)
    RANGE_MAX = DEFAULT_RANGE_SIZE - 1

    def __init__(self, points_per_consumer: int = 100) -> None:
        if points_per_consumer < 1:
            raise ValueError(f"points_per_consumer must be >= 1; got {points_per_consumer}")
        self.points_per_consumer = points_per_consumer
        self._ring: dict[int, _RingPoint[C]] = {}
        self._keys: list[int] = []  # sorted slots of _ring
        self._index_of: dict[C, int] = {}
        self._used_indexes: dict[str, set[int]] = {}

    def __len__(self) -> int:
        return len(self._index_of)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._index_of

    @classmethod
    def _slot_of_hash(cls, h: int) -> int:
        return h % cls.RANGE_MAX + 1

    def point_slots(self, name: str, name_index: int = 0) -> list[int]:
        """The ring slots of the points of a consumer named ``name`` with that index."""
        return [
            self._slot_of_hash(sticky_key_hash(f"{name}\0{name_index}\0{i}"))
            for i in range(self.points_per_consumer)
        ]

    def add_consumer(self, consumer: C) -> None:
        if consumer in self._index_of:
            raise ConsumerAssignError(f"consumer {consumer_name(consumer)!r} is already added")
        name = consumer_name(consumer)
        used = self._used_indexes.setdefault(name, set())
        index = next(i for i in range(len(used) + 1) if i not in used)
        used.add(index)
        self._index_of[consumer] = index
        for slot in self.point_slots(name, index):
            point = self._ring.get(slot)
            if point is None:
                self._ring[slot] = _RingPoint(consumer)
                bisect.insort(self._keys, slot)
            else:
                point.colliding.append(consumer)

    def remove_consumer(self, consumer: C) -> None:
        index = self._index_of.pop(consumer, None)
        if index is None:
            return
        name = consumer_name(consumer)
        for slot in self.point_slots(name, index):
            if self._ring[slot].remove(consumer):
                del self._ring[slot]
                self._keys.pop(bisect.bisect_left(self._keys, slot))
        used = self._used_indexes[name]
        used.discard(index)
        if not used:
            del self._used_indexes[name]

    def slot(self, key: bytes | str) -> int:
        """The slot of a key: sticky hash % 65535 + 1."""
        return self._slot_of_hash(sticky_key_hash(key))

    def select(self, key: bytes | str) -> C | None:
        return self.select_slot(self.slot(key))

    def select_slot(self, slot: int) -> C | None:
        if not self._keys:
            return None
        i = bisect.bisect_left(self._keys, slot)
        return self._ring[self._keys[i if i < len(self._keys) else 0]].selected

    def ranges(self) -> Ranges[C]:
        """Slot ranges per consumer, adjacent ranges of one consumer joined; the slots
        after the last point wrap around to the first point's consumer."""
        if not self._keys:
            return {}
        spans: list[tuple[int, int, C]] = []
        start = 1
        for slot in self._keys:
            consumer = self._ring[slot].selected
            assert consumer is not None
            if spans and spans[-1][2] == consumer:
                spans[-1] = (spans[-1][0], slot, consumer)
            else:
                spans.append((start, slot, consumer))
            start = slot + 1
        if start <= self.RANGE_MAX:
            first = spans[0][2]
            if spans[-1][2] == first:
                spans[-1] = (spans[-1][0], self.RANGE_MAX, first)
            else:
                spans.append((start, self.RANGE_MAX, first))
        out: Ranges[C] = {}
        for lo, hi, consumer in spans:
            out.setdefault(consumer, []).append((lo, hi))
        for rs in out.values():
            rs.sort()
        return out

    def export(self, ref: Ref) -> dict[str, Any]:
        """The ring as JSON-able data, naming consumers by ``ref`` (see
        :meth:`AutoSplitHashRangeSelector.export`)."""
        return {
            "index": sorted([ref(c), i] for c, i in self._index_of.items()),
            "ring": [
                [slot, ref(p.selected), [ref(c) for c in p.colliding]]
                for slot in self._keys
                for p in [self._ring[slot]]
            ],
        }

    def restore(self, data: dict[str, Any], resolve: Resolve) -> None:
        """Load what :meth:`export` gave into this empty selector."""
        for r, index in data["index"]:
            consumer = resolve(r)
            self._index_of[consumer] = index
            self._used_indexes.setdefault(consumer_name(consumer), set()).add(index)
        for slot, selected, colliding in data["ring"]:
            point = _RingPoint(resolve(selected))
            point.colliding = [resolve(c) for c in colliding]
            self._ring[slot] = point
            self._keys.append(slot)


class StickyHashRangeSelector(Generic[C]):
    """Pulsar's HashRangeExclusiveStickyKeyConsumerSelector (Key_Shared STICKY mode).

    Each consumer brings its own inclusive slot ranges within ``0..range_size-1``; ranges
    may not overlap (theirs or anyone's) and may not be empty. A key whose slot no range
    covers goes to nobody: the subscription holds it until a consumer covers it.

    >>> s = StickyHashRangeSelector()
    >>> s.add_consumer("a", [(0, 32767)]); s.add_consumer("b", [(32768, 65535)])
    >>> s.select_slot(100), s.select_slot(40000)
    ('a', 'b')
    """

    #: a joining consumer only takes keys nobody had
    moves_keys_on_join = False

    def __init__(self, range_size: int = DEFAULT_RANGE_SIZE) -> None:
        if range_size < 1:
            raise ValueError(f"range_size must be >= 1; got {range_size}")
        self.range_size = range_size
        self._starts: list[int] = []
        self._by_start: dict[int, tuple[int, C]] = {}
        self._ranges_of: dict[C, list[tuple[int, int]]] = {}

    def __len__(self) -> int:
        return len(self._ranges_of)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._ranges_of

    def add_consumer(self, consumer: C, ranges: Iterable[tuple[int, int]] | None = None) -> None:
        name = consumer_name(consumer)
        if consumer in self._ranges_of:
            raise ConsumerAssignError(f"consumer {name!r} is already added")
        if ranges is None:
            raise ConsumerAssignError(
                f"consumer {name!r} must give its hash ranges for a sticky Key_Shared "
                "subscription, e.g. [(0, 32767)]"
            )
        wanted = sorted((int(lo), int(hi)) for lo, hi in ranges)
        if not wanted:
            raise ConsumerAssignError(f"consumer {name!r} gave no hash ranges")
        top = self.range_size - 1
        for lo, hi in wanted:
            if lo > hi:
                raise ConsumerAssignError(
                    f"consumer {name!r}: hash range [{lo}, {hi}] is empty (start > end)"
                )
            if lo < 0 or hi > top:
                raise ConsumerAssignError(
                    f"consumer {name!r}: hash range [{lo}, {hi}] is outside [0, {top}]"
                )
        for (lo1, hi1), (lo2, hi2) in itertools.pairwise(wanted):
            if lo2 <= hi1:
                raise ConsumerAssignError(
                    f"consumer {name!r}: its own hash ranges [{lo1}, {hi1}] and "
                    f"[{lo2}, {hi2}] overlap"
                )
        for lo, hi in wanted:
            other = self._overlapping(lo, hi)
            if other is not None:
                (olo, ohi), owner = other
                raise ConsumerAssignError(
                    f"consumer {name!r}: hash range [{lo}, {hi}] overlaps [{olo}, {ohi}] "
                    f"of consumer {consumer_name(owner)!r}"
                )
        for lo, hi in wanted:
            bisect.insort(self._starts, lo)
            self._by_start[lo] = (hi, consumer)
        self._ranges_of[consumer] = wanted

    def _overlapping(self, lo: int, hi: int) -> tuple[tuple[int, int], C] | None:
        i = bisect.bisect_right(self._starts, hi)  # ranges starting at or before hi
        if i:
            start = self._starts[i - 1]
            end, owner = self._by_start[start]
            if end >= lo:
                return (start, end), owner
        return None

    def remove_consumer(self, consumer: C) -> None:
        for lo, _ in self._ranges_of.pop(consumer, []):
            self._starts.remove(lo)
            del self._by_start[lo]

    def slot(self, key: bytes | str) -> int:
        """The slot of a key: sticky hash % range_size, 0 taken as 1."""
        return range_slot(key_bytes(key), self.range_size)

    def select(self, key: bytes | str) -> C | None:
        return self.select_slot(self.slot(key))

    def select_slot(self, slot: int) -> C | None:
        i = bisect.bisect_right(self._starts, slot)
        if not i:
            return None
        end, owner = self._by_start[self._starts[i - 1]]
        return owner if slot <= end else None

    def ranges(self) -> Ranges[C]:
        return {c: list(rs) for c, rs in self._ranges_of.items()}

    def export(self, ref: Ref) -> list[Any]:
        """Each consumer's ranges, naming consumers by ``ref``."""
        return [[ref(c), [list(r) for r in rs]] for c, rs in self._ranges_of.items()]

    def restore(self, data: list[Any], resolve: Resolve) -> None:
        """Load what :meth:`export` gave into this empty selector."""
        for r, ranges in data:
            self.add_consumer(resolve(r), [tuple(x) for x in ranges])


StickyKeySelector = (
    AutoSplitHashRangeSelector[C] | ConsistentHashingSelector[C] | StickyHashRangeSelector[C]
)


_SELECTORS = {
    "consistent_hashing": ConsistentHashingSelector,
    "auto_split": AutoSplitHashRangeSelector,
    "sticky": StickyHashRangeSelector,
}


def make_selector(spec: str | Any) -> Any:
    """The key_shared selector ``spec`` names (``"consistent_hashing"``, ``"auto_split"``,
    ``"sticky"``), or ``spec`` itself, a selector object or class, once checked."""
    if isinstance(spec, type):
        spec = spec()
    if not isinstance(spec, str):
        for method in ("add_consumer", "remove_consumer", "select", "ranges"):
            if not callable(getattr(spec, method, None)):
                raise ConfigError(f"key_shared_selector {spec!r} has no {method}()")
        return spec
    try:
        return _SELECTORS[spec]()
    except KeyError:
        choices = ", ".join(repr(k) for k in _SELECTORS)
        raise ConfigError(
            f"unknown key_shared_selector {spec!r}; choose one of {choices} "
            "or pass a selector object"
        ) from None
