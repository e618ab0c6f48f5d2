"""Joins without window: a temporal join on event time, one answer for any split.

Each side of the join is a **versioned table** (Kafka Streams' versioned stores, KIP-889
and KIP-914; Flink's event-time temporal join): every record is a version of its key,
stamped with its timestamp and its *position* in its input. A record meets the other
side's version **as of its own time**: the version with the greatest ``(timestamp,
position)`` at or before its own ``(timestamp, position)``, provided that version is
still valid (``timestamp + ttl`` not before the record's timestamp)::

    right (customers)   silver@10      gold@20                 platinum@40
    time  ──────────────────┼─────────────┼──────────┼─────────────┼──────────▶
    left  (orders)                  o1@15        o2@30        o3@40 (after platinum
                                      │            │          in the input: sees it)
                              meets silver    meets gold

**Ties.** Records of equal timestamps are ordered by their position: for lines of files,
the source topic's declaration order, then the file (in path order), then the byte at
which the line starts; for the test driver, the order of ``pipe()`` calls; for records
of a topic no rstreams ingest wrote, the topic's declaration order, then queue, then
offset. None of these depends on how a run split its input into queues, how many workers
ran it, or when they were killed. Records derived from one input record (a flatMap's
outputs) share its position and keep their order.

**When results leave.** A record can only be answered once every version that could
precede it has arrived: once the step's stream time has passed the record's ``timestamp
+ grace``. Stream time is the input's watermark where it has one (the durable
engine's joins always do: their producers send it after each batch, since a batch
reaches the join one side after the other), else the largest timestamp seen (records
arrive in their input's order: the test driver, Spark's replay). Until then the
record waits in the state; at the end of a bounded input everything waiting is
answered. Results leave in ``(timestamp, position)`` order, so the result of a key that
changes over time is, last, the one of its latest record, on every backend. Records
later than that (``timestamp + grace`` behind stream time when they arrive) are joined
at once with what is retained, are not stored as a version, and count as late, as the
windowed join's late records.

**Sides.** Both sides are versioned and, by default, both emit: a record of either side
meets the other side's version as of its time (a table-table join over versioned
tables). A side marked as a *table* (``emits`` names only the other side) only stores its
versions; only the other side's records produce results (a stream-table join). Inner
joins emit only matches; a left join also emits a left record that meets no version as
``joiner(left, None)``; an outer join does so on both sides.

**State.** Per side and key, the versions in ``(timestamp, position)`` order; versions
that no future lookup can reach are purged: every version but the latest one older than
``stream time - grace`` (future lookups are at least that late), and the latest too once
it is older than ``ttl`` at that time. Entries: ``("v", side, key) -> [[ts, pos, value],
...]``, ``("p", ts, pos, side, n) -> [key, value, offset]`` for a record waiting to be
answered (``n`` a counter that keeps equal positions apart), ``("c",) -> n``. A null key
follows :func:`rstreams.semantics.nullkeys.null_key_pair`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from rstreams.semantics.nullkeys import null_key_pair
from rstreams.semantics.timing import NO_TIME, Emit, HeapKey, State, TimedCore

__all__ = ["BOTH", "TemporalJoinCore", "VersionedTable", "as_of"]

#: ``emits`` when both sides' records produce results.
BOTH = "LR"
_INF = 2**63


def as_of(versions: list[list[Any]], ts: int, pos: Any) -> int:
    """Index of the version with the greatest ``(ts, pos)`` at or before ``(ts, pos)``
    in ``versions`` (sorted ``[ts, pos, value]`` rows), or -1.

    >>> rows = [[10, 1, "silver"], [20, 5, "gold"], [20, 9, "platinum"]]
    >>> [as_of(rows, t, p) for t, p in [(5, 0), (15, 0), (20, 5), (20, 8), (99, 0)]]
    [-1, 0, 1, 1, 2]
    """
    lo, hi = 0, len(versions)
    while lo < hi:  # bisect_right on (ts, pos), without building key tuples
        mid = (lo + hi) // 2
        row = versions[mid]
        if ts < row[0] or (ts == row[0] and pos < row[1]):
            hi = mid
        else:
            lo = mid + 1
    return lo - 1


class VersionedTable:
    """One side's versions per key over a :class:`State` (Kafka's
    ``VersionedKeyValueStore``: ``put(key, value, ts)``, ``get(key, as_of)``), with
    the purge rule of the module docstring.

    >>> from rstreams.semantics.timing import DictState
    >>> t = VersionedTable("R", DictState(), ttl=100)
    >>> t.put("c1", "silver", 10, 1), t.put("c1", "gold", 20, 2)  # (a new key?)
    (True, False)
    >>> t.get("c1", 15, 0), t.get("c1", 25, 0), t.get("c1", 5, 0), t.get("c1", 121, 0)
    ('silver', 'gold', None, None)
    >>> t.purge("c1", horizon=30)  # silver is out of every lookup; gold valid until 120
    121
    >>> t.versions("c1")
    [[20, 2, 'gold']]
    """

    __slots__ = ("keys", "side", "state", "ttl", "versions_held")

    def __init__(self, side: str, state: State, ttl: int) -> None:
        self.side = side
        self.state = state
        self.ttl = ttl
        #: keys and versions held (for metrics; kept as versions come and go)
        self.keys = 0
        self.versions_held = 0

    def versions(self, key: Any) -> list[list[Any]]:
        """The key's versions, oldest first (a copy the caller may change)."""
        stored = self.state.get(("v", self.side, key))
        return [] if stored is None else [list(r) for r in stored]

    def count(self, rows: list[list[Any]]) -> None:
        """Count a key's restored versions in :meth:`sizes`."""
        self.keys += 1
        self.versions_held += len(rows)

    def put(self, key: Any, value: Any, ts: int, pos: Any, horizon: int = NO_TIME) -> bool:
        """Add a version; True if the key had none before. Versions no lookup at or
        after ``horizon`` can reach go at the same time."""
        rows = self.versions(key)
        new = not rows
        before = len(rows)
        if not rows or (ts, pos) >= (rows[-1][0], rows[-1][1]):
            rows.append([ts, pos, value])  # the usual case: in order
        else:
            rows.insert(as_of(rows, ts, pos) + 1, [ts, pos, value])
        self._trim(rows, horizon)
        self.keys += new
        self.versions_held += len(rows) - before
        self.state.put(("v", self.side, key), rows)
        return new

    def get(self, key: Any, ts: int, pos: Any) -> Any:
        """The value as of ``(ts, pos)``, or None (none yet, or older than ``ttl``)."""
        rows = self.versions(key)
        i = as_of(rows, ts, pos)
        if i < 0 or rows[i][0] + self.ttl < ts:
            return None
        return rows[i][2]

    def find(self, key: Any, ts: int, pos: Any) -> list[Any] | None:
        """The version row as of ``(ts, pos)`` (see :meth:`get`), or None. (The stored
        row itself, not a copy: the caller must not change it.)"""
        rows = self.state.get(("v", self.side, key))
        if rows is None:
            return None
        if len(rows) == 1:  # the usual case of a table: one version per key
            row = rows[0]
            if ts < row[0] or (ts == row[0] and pos < row[1]):
                return None
        else:
            i = as_of(rows, ts, pos)
            if i < 0:
                return None
            row = rows[i]
        if row[0] + self.ttl < ts:
            return None
        return row

    def _trim(self, rows: list[list[Any]], horizon: int) -> None:
        # Lookups to come are at or after ``horizon``: of the versions before it only
        # the latest can answer them, and only while it is valid there.
        k = 0
        while k + 1 < len(rows) and rows[k + 1][0] < horizon:
            k += 1
        if k:
            del rows[:k]
        if rows and rows[0][0] < horizon and rows[0][0] + self.ttl < horizon:
            del rows[0]

    def purge(self, key: Any, horizon: int) -> int | None:
        """Drop what no lookup at or after ``horizon`` can reach; the time the key
        next needs a look (its latest version's expiry), None once it has none."""
        rows = self.versions(key)
        before = len(rows)
        if not before:
            return None
        self._trim(rows, horizon)
        self.versions_held -= before - len(rows)
        if not rows:
            self.keys -= 1
            self.state.delete(("v", self.side, key))
            return None
        if len(rows) != before:
            self.state.put(("v", self.side, key), rows)
        return int(rows[-1][0] + self.ttl + 1)

    def sizes(self) -> tuple[int, int]:
        """(keys, versions) held now."""
        return self.keys, self.versions_held


#: ``on_error(exc, key, value, ts, offset)``: a deferred answer's joiner raised; the
#: adapter applies its error policy (raise to fail: the record then stays waiting).
OnError = Callable[[Exception, Any, Any, int, int], None]


class TemporalJoinCore(TimedCore):
    """The state of one task/queue of a join without window (see the module docstring).

    ``record(side, key, value, ts, offset, watermark, pos)`` takes one record; results
    go to ``emit(key, joiner(left, right), ts, offset)`` once stream time allows.
    ``offset`` is the record's offset in the join's input queue: it names the record
    in errors and keeps records of equal ``(ts, pos)`` (a flatMap's outputs) in their
    order of arrival.

    >>> from rstreams.semantics.timing import DictState
    >>> out = []
    >>> core = TemporalJoinCore("left", lambda o, c: (o, c), None, 15, DictState(),
    ...                         lambda k, v, ts, off: out.append(v))  # grace 15
    >>> core.record("L", "c1", "o1", 30, 0, pos=3)   # an order arrives first ...
    True
    >>> core.record("R", "c1", "gold", 20, 1, pos=2)  # ... its customer's version later
    True
    >>> out  # nothing yet: stream time (30) has not passed the order's time + grace
    []
    >>> core.end_of_input(); out
    [('o1', 'gold')]
    """

    def __init__(
        self,
        join_type: str,
        joiner: Callable[[Any, Any], Any],
        ttl: int | None,
        grace: int,
        state: State,
        emit: Emit,
        time: int = NO_TIME,
        emits: str = BOTH,
        on_error: OnError | None = None,
    ) -> None:
        super().__init__(state, emit, time)
        self.join_type = join_type
        self.joiner = joiner
        self.ttl = _INF if not ttl else int(ttl)
        self.grace = int(grace)
        self.emits = emits
        self.on_error = on_error
        self.outer = {"L": join_type in ("left", "outer"), "R": join_type == "outer"}
        self.looked_up = {"L": "R" in emits, "R": "L" in emits}
        self.sides = {"L": VersionedTable("L", state, self.ttl),
                      "R": VersionedTable("R", state, self.ttl)}  # fmt: skip
        #: the table a side's records look up
        self._other = {"L": self.sides["R"], "R": self.sides["L"]}
        #: records waiting to be answered: (ts, pos, side, offset)
        self.waiting: list[tuple[int, Any, str, int]] = []
        self._put_new = getattr(state, "put_new", state.put)
        self._get_many: Callable[[list[Any]], list[Any]] | None = getattr(state, "get_many", None)
        #: (due, side, key): when a key's versions need a look (expiry of its latest)
        self.expiry: list[tuple[int, str, HeapKey]] = []

    # -- restore ---------------------------------------------------------------------------

    def restore(self) -> None:
        """Rebuild the waiting and expiry heaps from the state (after a restart)."""
        old = []
        for skey, value in self.state.items():
            tag = skey[0]
            if tag == "p":
                _, ts, pos, side, off = skey
                self.waiting.append((ts, pos, side, off))
            elif tag == "v":
                _, side, key = skey
                self.sides[side].count(value)
                self.expiry.append((int(value[-1][0] + self.ttl + 1), side, HeapKey(key)))
            elif tag == "j" and len(skey) == 3:
                old.append((skey, value))
        for skey, value in old:
            # A table join's entry from before joins were temporal (its latest value):
            # a version of unknown position, before any other of its time.
            _, side, key = skey
            if self.sides[side].put(key, value[0], value[1], -1, self.horizon):
                self.expiry.append((int(value[1] + self.ttl + 1), side, HeapKey(key)))
            self.state.delete(skey)
        heapq.heapify(self.waiting)
        heapq.heapify(self.expiry)

    # -- records ---------------------------------------------------------------------------

    @property
    def horizon(self) -> int:
        """Lookups to come are at or after this time (stream time - grace)."""
        return self.time - self.grace if self.time != NO_TIME else NO_TIME

    def record(
        self,
        side: str,
        k: Any,
        v: Any,
        ts: int,
        off: int,
        watermark: int | None = None,
        pos: Any = 0,
    ) -> bool:
        """One record of ``side`` ("L"/"R") at ``(ts, pos)``. False if it was late
        (answered at once, not stored). Raises what the joiner raises for this record
        (late, or a null key); what it raises for a waiting record goes to
        ``on_error`` (without one: raised, and that record stays waiting)."""
        if ts > self.max_time:
            self.max_time = ts
        if self.advance_time(watermark):
            # Answer what the new time allows before this record's version trims the
            # history they may need (their times are before this record's).
            self._drain(off, False, None)
        late = False
        if k is None:
            self._null_key(side, v, ts, off)
        elif ts + self.grace < self.time:
            late = True
            if side in self.emits:
                self._answer(side, k, v, ts, pos, off)
        else:
            # A side's versions are looked up only by the other side's records: none
            # to keep when that side only stores (a table).
            if self.looked_up[side] and self.sides[side].put(k, v, ts, pos, self.horizon):
                heapq.heappush(self.expiry, (int(ts + self.ttl + 1), side, HeapKey(k)))
            if side in self.emits:
                # (new: a record answered before the next commit leaves no changelog record)
                self._put_new(("p", ts, pos, side, off), [k, v])
                heapq.heappush(self.waiting, (ts, pos, side, off))
        self._expire_due(off, None)
        return not late

    def records(
        self,
        keys: list[Any],
        tagged: list[Any],
        timestamps: list[int],
        offsets: list[int],
        watermark: int | None,
        failed: Callable[[int, Exception], None],
    ) -> tuple[list[int], int]:
        """A batch of records: :meth:`record` of each in turn, with the same results (in
        the same order), late records, and state at the end, at less cost per record.
        ``tagged[i]`` is ``(side, value)`` or ``(side, value, position)``. Records of
        the batch answered within it never go through the state (they are kept here
        meanwhile); those still waiting at its end are stored then. ``failed(i, error)``:
        what :meth:`record` of record ``i`` raised (it may raise to stop the batch).
        Returns the indexes of the late records and the count of null keys.

        (The records' waiting entries are assumed not to be in the state already, as
        ``put_new`` assumes; a store that has ``put_new`` gives the same state either
        way.)"""
        late: list[int] = []
        nulls = 0
        mem: dict[tuple[int, Any, str, int], list[Any]] = {}
        waiting, expiry, sides = self.waiting, self.expiry, self.sides
        emits, looked_up, grace, ttl = self.emits, self.looked_up, self.grace, self.ttl
        push, put_new = heapq.heappush, self._put_new
        limit, horizon = self.time - grace, self.horizon  # (as _drain has them)
        # With a watermark, stream time moves at most once (at the first record): none
        # of the batch's records is answered within it, no need to hold them here.
        hold = watermark is None
        try:
            for i, ts in enumerate(timestamps):
                k, t, off = keys[i], tagged[i], offsets[i]
                side = t[0]
                if k is None:
                    nulls += 1
                try:
                    if ts > self.max_time:
                        self.max_time = ts
                    now = self.max_time if watermark is None else watermark
                    if now > self.time:  # (advance_time)
                        self.time = now
                        limit, horizon = now - grace, self.horizon
                        self._drain(off, False, mem)
                    if k is None:  # (rare: not worth inlining)
                        self._null_key(side, t[1], ts, off)
                    elif ts + grace < self.time:  # late (rare too)
                        if side in emits:
                            self._answer(side, k, t[1], ts, t[2] if len(t) > 2 else 0, off)
                        self._expire_due(off, mem)
                        late.append(i)  # (unless it raised: as record())
                        continue
                    else:
                        pos = t[2] if len(t) > 2 else 0
                        if looked_up[side] and sides[side].put(k, t[1], ts, pos, horizon):
                            push(expiry, (int(ts + ttl + 1), side, HeapKey(k)))
                        if side in emits:
                            w = (ts, pos, side, off)
                            if hold:
                                mem[w] = [k, t[1]]
                            else:  # (new: see record())
                                put_new(("p", ts, pos, side, off), [k, t[1]])
                            push(waiting, w)
                    if (waiting and waiting[0][0] < limit) or (expiry and expiry[0][0] <= horizon):
                        self._drain(off, False, mem)  # (as record() after each record)
                except Exception as e:
                    failed(i, e)
        finally:
            self._store_waiting(mem)
        return late, nulls

    def _null_key(self, side: str, v: Any, ts: int, off: int) -> None:
        """A record with a None key: it matches nothing and is never stored; a side that
        emits answers it at once, alone (a left or outer join's unmatched record)."""
        if side in self.emits:
            pair = null_key_pair(self.join_type, side, v)
            if pair is not None:
                self.emit(None, self.joiner(*pair), ts, off)

    def _store_waiting(self, mem: dict[tuple[int, Any, str, int], list[Any]]) -> None:
        """The records of a batch (:meth:`records`) still waiting at its end, stored as
        :meth:`record` stores them."""
        for (ts, pos, side, off), entry in mem.items():
            self._put_new(("p", ts, pos, side, off), entry)

    def _answer(self, side: str, k: Any, v: Any, ts: int, pos: Any, off: int) -> None:
        found = self.sides["R" if side == "L" else "L"].find(k, ts, pos)
        if found is None:
            if not self.outer[side]:
                return
            ov = None
        else:
            ov = found[2]
        if side == "L":
            self.emit(k, self.joiner(v, ov), ts, off)
        else:
            self.emit(k, self.joiner(ov, v), ts, off)

    def expire(self, off: int, everything: bool = False) -> None:
        """Answer the records stream time allows (all of them: ``everything``), in
        ``(ts, pos)`` order, then purge versions no lookup can reach any more."""
        self._drain(off, everything, None)

    def _expire_due(self, off: int, mem: dict[Any, list[Any]] | None) -> None:
        """:meth:`expire` if it has anything to do (after a record: usually not)."""
        waiting, expiry = self.waiting, self.expiry
        if (waiting and waiting[0][0] < self.time - self.grace) or (
            expiry and expiry[0][0] <= self.horizon
        ):
            self._drain(off, False, mem)

    def _drain(self, off: int, everything: bool, mem: dict[Any, list[Any]] | None) -> None:
        """:meth:`expire`; ``mem``: waiting records of the batch under way, not stored
        yet (by their heap entry)."""
        waiting = self.waiting
        limit = self.time - self.grace  # answered once ts + grace < stream time
        if waiting and (everything or waiting[0][0] < limit):
            if everything:
                ready = sorted(waiting)
                waiting.clear()
            else:
                pop, ready = heapq.heappop, []
                while waiting and waiting[0][0] < limit:
                    ready.append(pop(waiting))
            self._answer_ready(ready, mem)
        expiry, horizon = self.expiry, self.horizon
        while expiry and expiry[0][0] <= horizon:
            _, side, hk = heapq.heappop(expiry)
            due = self.sides[side].purge(hk.key, horizon)
            if due is not None:
                heapq.heappush(expiry, (max(due, horizon + 1), side, hk))

    def _answer_ready(self, ready: list[Any], mem: dict[Any, list[Any]] | None) -> None:
        """Answer the waiting records ``ready`` (taken off the heap, in order) and drop
        their entries; from one whose error is raised on, they go back on the heap."""
        state, emit, joiner, outer, ttl = self.state, self.emit, self.joiner, self.outer, self.ttl
        get, other = state.get, self._other
        skeys = [("p", *w) for w in ready]
        # (One read for all of them, unless some are the batch's, in ``mem``.)
        get_many = self._get_many
        entries = vrows = None
        if not mem and get_many is not None:
            entries = get_many(skeys)
            if None not in entries:  # (and the versions they meet: none change here)
                vrows = get_many(
                    [("v", "R" if w[2] == "L" else "L", e[0]) for w, e in zip(ready, entries)]
                )
        prev = None
        for j, w in enumerate(ready):
            ts, pos, side, roff = w
            entry = mem.pop(w, None) if mem else None
            stored = entry is None
            # (An entry twice on the heap, after a replay: read again, as it goes.)
            again = w == prev
            if stored:
                entry = get(skeys[j]) if entries is None or again else entries[j]
            prev = w
            if entry is None:
                continue
            k, v = entry
            try:  # (_answer, with VersionedTable.find's one-version case inline)
                if vrows is None or again:
                    rows = get(("v", "R" if side == "L" else "L", k))
                else:
                    rows = vrows[j]
                if rows is None:
                    found = None
                elif len(rows) == 1:
                    found = rows[0]
                    if (
                        ts < found[0]
                        or (ts == found[0] and pos < found[1])
                        or (found[0] + ttl < ts)
                    ):
                        found = None
                else:
                    found = other[side].find(k, ts, pos)
                if found is not None:
                    ov = found[2]
                    emit(k, joiner(v, ov) if side == "L" else joiner(ov, v), ts, roff)
                elif outer[side]:
                    emit(k, joiner(v, None) if side == "L" else joiner(None, v), ts, roff)
            except Exception as e:
                try:
                    if self.on_error is None:
                        raise  # (it stays waiting)
                    self.on_error(e, k, v, ts, roff)  # (raises: it stays waiting)
                except BaseException:
                    if not stored:
                        self._put_new(skeys[j], entry)
                    for rest in ready[j:]:
                        heapq.heappush(self.waiting, rest)
                    raise
            if stored:
                state.delete(skeys[j])

    def end_of_input(self) -> None:
        """Bounded input ended: every waiting record is answered; of the versions, what
        a later run that goes on with more input could still meet stays (the latest of
        each key and side, and those within grace of stream time)."""
        self.expire(-1, everything=True)
        horizon, keep = self.horizon, []
        for due, side, hk in self.expiry:
            nxt = self.sides[side].purge(hk.key, horizon)
            if nxt is not None:
                keep.append((max(due, nxt), side, hk))
        heapq.heapify(keep)
        self.expiry = keep

    def sizes(self) -> dict[str, int]:
        """What the state holds now: keys and versions (both sides), waiting records."""
        lk, lv = self.sides["L"].sizes()
        rk, rv = self.sides["R"].sizes()
        return {"keys": lk + rk, "versions": lv + rv, "waiting": len(self.waiting)}
