"""Windowed aggregations (Kafka Streams semantics) as one state machine.

A record updates a window [start, end) only if ``end > stream time - grace``;
otherwise it is late. A window closes once no record that is not late can change it:
when stream time reaches ``end + grace`` (a record at ``end`` falls in the next window);
a session ``[start, end]``, which a record at ``end + gap`` still extends, when stream
time passes ``end + gap + grace`` (:meth:`WindowCore.close_time`). So a record at the
time that closes something never finds closed what it belongs to, whichever record
brought stream time there first, on whatever queue: ties do not decide. Closed windows
are expired: with ``emit="close"`` their final result is emitted first; either way
their state is deleted, so state does not grow with time. Sessions of a key merge when
a record falls within ``gap`` of several. Results carry, as their timestamp, the
window's largest record timestamp (a session's end).

State entries: ``("w", key, start) -> (aggregate, largest timestamp)`` for tumbling and
hopping windows, ``("s", key, start) -> (end, aggregate)`` for sessions. The expiry heap
(``(close time, HeapKey(key), start)``, cleaned lazily) and the sessions per key are
indexes over the state, rebuilt by :meth:`WindowCore.restore`.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import Any

from rstreams.dsl.windows import HoppingWindow, SessionWindow, TumblingWindow
from rstreams.semantics.aggregations import Aggregation
from rstreams.semantics.timing import NO_TIME, Emit, HeapKey, State, TimedCore
from rstreams.windowed import Windowed

__all__ = ["WindowCore"]

#: Later than any close time.
_NEVER = float("inf")


class WindowCore(TimedCore):
    """The windows of one task/queue of a window step.

    Drive it with :meth:`record`, :meth:`advance` (the watermark moved),
    :meth:`end_of_input` and, with ``idle`` (``close_after_idle`` ms), :meth:`close_idle`.
    With ``idle``, set :attr:`now` (wall ms) before recording.
    """

    def __init__(
        self,
        agg: Aggregation,
        window: Any,
        emit_mode: str,
        state: State,
        emit: Emit,
        time: int = NO_TIME,
        idle: int | None = None,
        update: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        super().__init__(state, emit, time)
        self.agg = agg
        #: update(aggregate or None, value): the aggregation's over raw values unless
        #: the caller's values are partials already (``agg.fold_update``).
        self.update = agg.update if update is None else update
        self.spec = window
        self.grace: int = window.grace
        self.session = isinstance(window, SessionWindow)
        self.gap: int = window.gap if self.session else 0
        self.size: int = 0 if self.session else window.size
        self.emit_close = emit_mode == "close"
        self.idle = idle
        self.now = 0
        self.heap: list[tuple[int, HeapKey, int]] = []  # (close time, key, start)
        self.sessions: dict[Any, dict[int, int]] = {}  # key -> {start: end}
        self.starts: dict[Any, list[int]] = {}  # key -> its sessions' starts, in order
        self.touched: dict[tuple[Any, int], int] = {}  # (key, start) -> wall ms of update
        #: ``emit_window(key, start, end, value, ts, offset, new)``: an update-mode
        #: result (None: a session merged away or grown longer; ``new``: the window's
        #: first result); by default ``emit(Windowed(key, start, end), ...)``. A caller
        #: that keeps only the latest per window may take the bounds as they are and
        #: make the key once (the engine's coalesced updates), and leave out the None of
        #: a window whose first result it has not sent yet.
        self.emit_window: Callable[[Any, int, int, Any, int, int, bool], None] = self._emit_windowed

    def _emit_windowed(
        self, k: Any, start: int, end: int, v: Any, ts: int, off: int, new: bool
    ) -> None:
        self.emit(Windowed(k, start, end), v, ts, off)

    def restore(self) -> None:
        """Rebuild the indexes and the close-time heap from the state (every window in
        it is open: a closed one was deleted; every backend keeps only the state, the
        heap follows from it, as :meth:`close_time` has it). A restored window's idle
        clock starts at :attr:`now`."""
        tag = "s" if self.session else "w"
        for skey, value in self.state.items():
            if len(skey) != 3 or skey[0] != tag:
                continue  # another entry of the store (its stream time)
            _, key, start = skey
            end = value[0] if self.session else start + self.size
            self._track(key, start, end)

    def close_time(self, end: int) -> int:
        """The stream time at which the window or session ending at ``end`` closes:
        ``end + grace`` for a window ``[start, end)``; ``end + gap + grace + 1`` for a
        session ``[start, end]`` (a record at ``end + gap`` still extends it, and is not
        late until stream time passes ``end + gap + grace``)."""
        return end + self.grace + self.gap + (1 if self.session else 0)

    def _track(self, key: Any, start: int, end: int) -> None:
        heapq.heappush(self.heap, (self.close_time(end), HeapKey(key), start))
        if self.session:
            self.sessions.setdefault(key, {})[start] = end
            bisect.insort(self.starts.setdefault(key, []), start)
        if self.idle is not None:
            self.touched[(key, start)] = self.now

    def record(self, k: Any, v: Any, ts: int, off: int, watermark: int | None = None) -> bool:
        """One record (offset ``off``): True if it updated a window, False if it was
        late. Raises what the aggregation raises (then nothing expires)."""
        if ts > self.max_time:
            self.max_time = ts
            self.advance_time(watermark)
        ok = self._session(k, v, ts, off) if self.session else self._windows(k, v, ts, off)
        self.expire(off)
        return ok

    def records(
        self,
        keys: list[Any],
        values: list[Any],
        timestamps: list[int],
        offsets: list[int],
        watermark: int | None,
        failed: Callable[[int, Exception], None],
    ) -> list[int]:
        """A batch of records of tumbling or hopping windows (not sessions) whose
        updates need not come out one by one (``emit="close"``, or a caller that keeps
        only each window's latest update): the same state, closes and late records as
        :meth:`record` on each in turn, with each window's records folded together
        (one state read and write and one update result per window and batch, not per
        record). ``failed(i, error)``: record ``i``'s aggregation raised (called once
        per record; the record is left out of its other windows; it may raise to stop
        the batch). Returns the indexes of the late records."""
        assert not self.session
        spec, grace, size = self.spec, self.grace, self.size
        hopping = isinstance(spec, HoppingWindow)
        windows_for = spec.windows_for
        groups: dict[tuple[Any, int], list[int]] = {}  # (key, start) -> its records
        soonest = _NEVER  # the earliest close time of the windows in groups
        heap = self.heap
        late: list[int] = []
        for i, (k, ts) in enumerate(zip(keys, timestamps)):
            if ts > self.max_time:
                self.max_time = ts
                if self.advance_time(watermark) and (
                    soonest <= self.time or (heap and heap[0][0] <= self.time)
                ):
                    # Windows close: fold what they got first (this record is late for them).
                    self._fold(groups, values, timestamps, offsets, failed)
                    groups, soonest = {}, _NEVER
                    self.expire(offsets[i])
            low = self.time - grace
            if hopping:
                live: Any = [s for s, e in windows_for(ts) if e > low]
            else:
                s = ts - ts % size
                live = (s,) if s + size > low else ()
            if not live:
                late.append(i)
                continue
            for s in live:
                rows = groups.get((k, s))
                if rows is None:
                    groups[(k, s)] = [i]
                    if s + size + grace < soonest:
                        soonest = s + size + grace
                else:
                    rows.append(i)
        self._fold(groups, values, timestamps, offsets, failed)
        return late

    def _fold(
        self,
        groups: dict[tuple[Any, int], list[int]],
        values: list[Any],
        timestamps: list[int],
        offsets: list[int],
        failed: Callable[[int, Exception], None],
    ) -> None:
        """Apply each window's records (``groups``) to its state, in order, and emit the
        window's result once (update mode)."""
        state, update, size = self.state, self.update, self.size
        emit = None if self.emit_close else self.emit_window
        bad: set[int] = set()
        for (k, s), rows in groups.items():
            skey = ("w", k, s)
            old = state.get(skey)
            acc = None if old is None else old[0]
            top = NO_TIME if old is None else old[1]
            done = -1
            for i in rows:
                if i in bad:
                    continue
                try:
                    acc = update(acc, values[i])
                except Exception as e:
                    bad.add(i)
                    failed(i, e)
                    continue
                done = i
                if timestamps[i] > top:
                    top = timestamps[i]
            if done < 0:
                continue  # (every record of the window failed: nothing changed)
            state.put(skey, None if acc is None else (acc, top))
            if old is None:
                self._track(k, s, s + size)
            elif self.idle is not None:
                self.touched[(k, s)] = self.now
            if emit is not None:
                emit(k, s, s + size, acc, top, offsets[done], old is None)

    def _windows(self, k: Any, v: Any, ts: int, off: int) -> bool:
        spec = self.spec
        assert isinstance(spec, (TumblingWindow, HoppingWindow))
        low = self.time - self.grace
        live = [(s, e) for s, e in spec.windows_for(ts) if e > low]
        state, emit = self.state, self.emit_window
        for s, e in live:
            skey = ("w", k, s)
            # (aggregate, largest timestamp of the window's records), the value and
            # timestamp of Kafka Streams' timestamped window store; every result of
            # the window carries that timestamp.
            old = state.get(skey)
            new = self.update(None if old is None else old[0], v)
            top = ts if old is None else max(ts, old[1])
            state.put(skey, None if new is None else (new, top))
            if old is None:
                self._track(k, s, e)
            elif self.idle is not None:
                self.touched[(k, s)] = self.now
            if not self.emit_close:
                emit(k, s, e, new, top, off, old is None)
        return bool(live)

    def _session(self, k: Any, v: Any, ts: int, off: int) -> bool:
        gap = self.gap
        mine = self.sessions.get(k, {})
        starts = self.starts.get(k, [])
        # The sessions within gap of ts (start <= ts + gap, end >= ts - gap): sessions
        # of a key are more than gap apart, so their ends are in start order too.
        hi = bisect.bisect_right(starts, ts + gap)
        lo = hi
        while lo > 0 and mine[starts[lo - 1]] >= ts - gap:
            lo -= 1
        merged = starts[lo:hi]
        start = min(ts, merged[0]) if merged else ts
        end = max(ts, mine[merged[-1]]) if merged else ts
        if end < self.time - self.grace:
            return False
        state = self.state
        # Merged first (in start order), changed after: a failing merge changes nothing.
        agg = self.update(None, v)
        merge = self.agg.merge
        for s in merged:
            agg = merge(state.get(("s", k, s))[1], agg)
        if len(merged) == 1 and merged[0] == start:
            # The common case: the record falls in one session, or extends its end.
            e = mine[start]
            mine[start] = end
            state.put(("s", k, start), (end, agg))
            if self.idle is not None:
                self.touched[(k, start)] = self.now
            if end != e:
                heapq.heappush(self.heap, (self.close_time(end), HeapKey(k), start))
            if not self.emit_close:
                if end != e:
                    self.emit_window(k, start, e, None, e, off, False)  # (now longer)
                self.emit_window(k, start, end, agg, end, off, end != e)
            return True
        kept = False  # (start, end) was a session already
        for s in merged:
            e = mine.pop(s)
            state.delete(("s", k, s))
            self.touched.pop((k, s), None)
            if (s, e) == (start, end):
                kept = True
            elif not self.emit_close:
                self.emit_window(k, s, e, None, e, off, False)  # the merged-away session
        del starts[lo:hi]
        state.put(("s", k, start), (end, agg))
        self._track(k, start, end)
        if not self.emit_close:
            # A session's end is its largest record timestamp: results carry it.
            self.emit_window(k, start, end, agg, end, off, not kept)
        return True

    def expire(self, off: int) -> None:
        heap = self.heap
        while heap and heap[0][0] <= self.time:
            _, hk, start = heapq.heappop(heap)
            self._close(hk.key, start, off, "event-time")

    def _close(self, key: Any, start: int, off: int, why: str) -> None:
        skey = ("s" if self.session else "w", key, start)
        value = self.state.get(skey)
        if value is None:
            return  # merged away or closed already (the heap is lazily cleaned)
        if self.session:
            end, agg = value
            if why == "event-time" and self.close_time(end) > self.time:
                return  # extended since: a later heap entry closes it
            self._forget(key, start)
            top = end
        else:
            end, (agg, top) = start + self.size, value
        if self.emit_close:
            self.emit(Windowed(key, start, end, closed=why), agg, top, off)
        self.state.delete(skey)
        self.touched.pop((key, start), None)

    def _forget(self, key: Any, start: int) -> None:
        """A closed session leaves the per-key indexes."""
        mine = self.sessions.get(key)
        if mine is None or mine.pop(start, None) is None:
            return
        starts = self.starts[key]
        del starts[bisect.bisect_left(starts, start)]
        if not mine:
            del self.sessions[key], self.starts[key]

    def end_of_input(self) -> None:
        """Bounded input ended: with emit="close", close every open window (results say
        "end-of-input"). In update mode every result is out already and the state stays,
        so a later run over more input continues the windows."""
        if not self.emit_close:
            return
        while self.heap:
            _, hk, start = heapq.heappop(self.heap)
            self._close(hk.key, start, -1, "end-of-input")

    def close_idle(self, now: int) -> None:
        """Wall-clock close of windows idle for ``idle`` ms at ``now``."""
        if self.idle is None:
            return
        for (key, start), at in list(self.touched.items()):
            if now - at >= self.idle:
                self._close(key, start, -1, "idle")
