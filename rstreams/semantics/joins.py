"""Windowed stream-stream joins (Kafka Streams semantics) as one state machine.

**Windowed** (a JoinWindow): each side's records are buffered for ``before + after +
grace`` of stream time; a record joins the other side's buffered records of its key
within ``[ts - before, ts + after]`` (a right record: ``[ts - after, ts + before]``),
each result timestamped with the later of the two. A record whose window has closed
(``ts + after`` (right: ``+ before``) ``+ grace < stream time``) is late: it still joins
what the other side retains but is not buffered; unmatched on a left/outer side it comes
out at once. A buffered record that expires unmatched comes out on a left/outer side
(``joiner(value, None)``/``joiner(None, value)``), at its own timestamp.

Joins without window are temporal joins: :mod:`rstreams.semantics.temporal`.

A record with a None key follows :func:`rstreams.semantics.nullkeys.null_key_pair`.

State entries: ``("j", side, key, ts, seq) -> (value, matched)``; sides are "L" and
"R", ``seq`` tells records of equal timestamps apart (the caller's offset of the record).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from rstreams.semantics.nullkeys import null_key_pair
from rstreams.semantics.timing import NO_TIME, Emit, HeapKey, State, TimedCore

__all__ = ["JoinCore"]


class JoinCore(TimedCore):
    """The join state of one task/queue of a join step."""

    def __init__(
        self,
        join_type: str,
        joiner: Callable[[Any, Any], Any],
        window: Any,
        state: State,
        emit: Emit,
        time: int = NO_TIME,
    ) -> None:
        super().__init__(state, emit, time)
        self.join_type = join_type
        self.joiner = joiner
        self.window = window
        self.outer_left = join_type in ("left", "outer")
        self.outer_right = join_type == "outer"
        self.heap: list[tuple[int, str, HeapKey, int, int]] = []
        # windowed: (side, key) -> {(ts, seq): [value, matched]}
        self.buffers: dict[tuple[str, Any], dict[tuple[int, int], list[Any]]] = {}

    def restore(self) -> None:
        """Rebuild the buffers and expiry heap from the state (every backend keeps only
        the state: the heap follows from it)."""
        for skey, value in self.state.items():
            if skey[0] != "j":
                continue  # another entry of the store (its stream time)
            _, side, key, ts, seq = skey
            self.buffers.setdefault((side, key), {})[(ts, seq)] = list(value)
            heapq.heappush(self.heap, (self._expiry(ts), side, HeapKey(key), ts, seq))

    def _outer(self, side: str) -> bool:
        return self.outer_left if side == "L" else self.outer_right

    def _expiry(self, ts: int) -> int:
        # Both sides stay buffered for before + after + grace: any record that can still
        # match a buffered one is not late yet (and an unmatched record is emitted only
        # when nothing can match it any more).
        w = self.window
        return int(ts + w.before + w.after + w.grace + 1)

    def _late(self, side: str, ts: int) -> bool:
        w = self.window
        return bool(ts + (w.after if side == "L" else w.before) + w.grace < self.time)

    def record(self, side: str, k: Any, v: Any, ts: int, seq: int,
               watermark: int | None = None, pos: Any = None) -> bool:  # fmt: skip
        """One record of ``side`` ("L"/"R") with sequence number ``seq`` (its offset):
        False if it was late (joined all the same, not buffered). Raises what the
        joiner raises (then nothing expires). ``pos``, the record's input position, is
        the temporal join's tie rule (:mod:`.temporal`); a windowed join has no use for
        it: it joins every record within the window."""
        if ts > self.max_time:
            self.max_time = ts
            self.advance_time(watermark)
        ok = True
        if k is None:
            # A None join key matches nothing: never buffered; unmatched at once on a
            # left/outer side, else dropped.
            pair = null_key_pair(self.join_type, side, v)
            if pair is not None:
                self.emit(None, self.joiner(*pair), ts, seq)
        else:
            ok = self._windowed(side, k, v, ts, seq)
        self.expire(seq)
        return ok

    def _windowed(self, side: str, k: Any, v: Any, ts: int, seq: int) -> bool:
        w = self.window
        other = "R" if side == "L" else "L"
        lo, hi = (ts - w.before, ts + w.after) if side == "L" else (ts - w.after, ts + w.before)
        matched = False
        for (ots, oseq), entry in sorted(self.buffers.get((other, k), {}).items()):
            if lo <= ots <= hi:
                left, right = (v, entry[0]) if side == "L" else (entry[0], v)
                self.emit(k, self.joiner(left, right), max(ts, ots), seq)
                matched = True
                if not entry[1]:
                    entry[1] = True
                    self.state.put(("j", other, k, ots, oseq), (entry[0], True))
        if self._late(side, ts):
            # As in Kafka Streams: a late record still joins what the other side retains
            # but is not buffered (its window store drops it as expired), so nothing
            # joins it later: unmatched on a left/outer side, it comes out at once.
            if not matched and self._outer(side):
                pair = (v, None) if side == "L" else (None, v)
                self.emit(k, self.joiner(*pair), ts, seq)
            return False
        self.buffers.setdefault((side, k), {})[(ts, seq)] = [v, matched]
        self.state.put(("j", side, k, ts, seq), (v, matched))
        heapq.heappush(self.heap, (self._expiry(ts), side, HeapKey(k), ts, seq))
        return True

    def end_of_input(self) -> None:
        """Bounded input ended: nothing can match any more; emit the unmatched."""
        self.expire(-1, everything=True)

    def expire(self, off: int, everything: bool = False) -> None:
        heap = self.heap
        while heap and (everything or heap[0][0] <= self.time):
            _, side, hk, ts, seq = heapq.heappop(heap)
            k = hk.key
            entries = self.buffers.get((side, k), {})
            entry = entries.pop((ts, seq), None)
            if entry is None:
                continue
            if not entries:
                self.buffers.pop((side, k), None)
            self.state.delete(("j", side, k, ts, seq))
            if not entry[1] and self._outer(side):
                pair = (entry[0], None) if side == "L" else (None, entry[0])
                self.emit(k, self.joiner(*pair), ts, off)
