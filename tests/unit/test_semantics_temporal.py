"""The temporal join of the semantics core (joins without window), over a dict state."""

from __future__ import annotations

import random
from typing import Any

import pytest

from rstreams.semantics.temporal import TemporalJoinCore
from rstreams.semantics.timing import DictState


class Run:
    def __init__(self, join_type: str = "left", *, ttl: int | None = None, grace: int = 0,
                 emits: str = "LR", state: DictState | None = None) -> None:  # fmt: skip
        self.out: list[tuple[Any, Any, int]] = []
        self.state = state or DictState()
        self.core = TemporalJoinCore(
            join_type, lambda a, b: (a, b), ttl, grace, self.state, self._emit, emits=emits
        )
        self.core.restore()
        self.n = 0

    def _emit(self, key: Any, value: Any, ts: int, off: int) -> None:
        self.out.append((key, value, ts))

    def feed(self, side: str, key: Any, value: Any, ts: int, pos: int | None = None) -> bool:
        self.n += 1
        return self.core.record(side, key, value, ts, self.n, None, self.n if pos is None else pos)


def test_a_record_meets_the_version_as_of_its_time_not_the_latest_to_arrive() -> None:
    r = Run(grace=10, emits="L")
    r.feed("L", "c", "o1", 15)
    r.feed("R", "c", "gold", 20)  # arrives after o1, but is later in event time
    r.feed("R", "c", "silver", 10)  # arrives last, but is o1's version
    r.core.end_of_input()
    assert r.out == [("c", ("o1", "silver"), 15)]


def test_ties_go_by_position_in_the_input() -> None:
    r = Run(emits="L")
    r.feed("R", "c", "silver", 5, pos=1)
    r.feed("R", "c", "gold", 5, pos=3)
    r.feed("L", "c", "before-gold", 5, pos=2)
    r.feed("L", "c", "after-gold", 5, pos=4)
    r.core.end_of_input()
    assert [v for _, v, _ in r.out] == [("before-gold", "silver"), ("after-gold", "gold")]


def test_results_wait_for_stream_time_past_ts_plus_grace_and_leave_in_time_order() -> None:
    r = Run(grace=5, emits="L")
    r.feed("L", "a", "x", 10)
    r.feed("L", "b", "y", 8)
    r.feed("L", "a", "z", 13)  # stream time 13: nothing is before 13 - 5
    assert r.out == []
    r.feed("L", "a", "w", 14)  # 14: y (8 + 5 < 14) leaves; x (10 + 5) not yet
    assert r.out == [("b", ("y", None), 8)]
    r.core.end_of_input()
    assert [ts for _, _, ts in r.out] == [8, 10, 13, 14]


def test_a_version_is_valid_for_ttl_of_event_time() -> None:
    r = Run("inner", ttl=10, emits="L")
    r.feed("R", "c", "v", 0)
    r.feed("L", "c", "in-time", 10)
    r.feed("L", "c", "too-late", 11)
    r.core.end_of_input()
    assert r.out == [("c", ("in-time", "v"), 10)]


def test_both_sides_emit_unless_one_is_a_table() -> None:
    both, table = Run("outer"), Run("outer", emits="L")
    for r in (both, table):
        r.feed("L", "c", "o1", 1)
        r.feed("R", "c", "gold", 2)
        r.core.end_of_input()
    assert both.out == [("c", ("o1", None), 1), ("c", ("o1", "gold"), 2)]
    assert table.out == [("c", ("o1", None), 1)]


def test_a_late_record_is_answered_at_once_and_not_stored() -> None:
    r = Run(grace=2)
    r.feed("R", "c", "v1", 10)
    r.feed("L", "x", "far", 20)  # stream time 20
    assert r.feed("L", "c", "late", 11) is False  # 11 + 2 < 20
    assert ("c", ("late", "v1"), 11) in r.out
    assert not any(k[:2] == ("v", "L") and k[2] == "c" for k in r.state.data)


def test_state_stays_bounded_by_grace_and_ttl() -> None:
    r = Run(ttl=100, grace=3)
    rnd = random.Random(3)
    for t in range(20_000):
        r.feed(rnd.choice("LR"), rnd.randrange(50), t, t)
        sizes = r.core.sizes()
        assert sizes["versions"] <= 2 * 50 + 2 * 4  # latest per key and side, + grace
        assert sizes["waiting"] <= 5
    for t in range(20_000, 20_300):  # the keys go quiet: their versions expire
        r.feed("L", "other", t, t)
    assert r.core.sizes()["keys"] == 1


def test_restored_from_its_state_it_goes_on_as_if_never_stopped() -> None:
    rnd = random.Random(8)
    events = [
        (rnd.choice("LR"), rnd.randrange(6), max(0, t - rnd.randrange(4))) for t in range(400)
    ]
    whole = Run("outer", ttl=30, grace=4)
    for side, k, ts in events:
        whole.feed(side, k, f"{side}{ts}", ts)
    whole.core.end_of_input()
    first = Run("outer", ttl=30, grace=4)
    for side, k, ts in events[:230]:
        first.feed(side, k, f"{side}{ts}", ts)
    second = Run("outer", ttl=30, grace=4, state=DictState(dict(first.state.data)))
    second.core.time = second.core.max_time = first.core.time  # (the store keeps it)
    second.n = first.n
    for side, k, ts in events[230:]:
        second.feed(side, k, f"{side}{ts}", ts)
    second.core.end_of_input()
    assert first.out + second.out == whole.out


def test_a_table_join_entry_of_the_old_format_becomes_a_version() -> None:
    state = DictState({("j", "R", "c"): ("gold", 5)})
    r = Run("left", state=state, emits="L")
    assert ("j", "R", "c") not in state.data
    r.feed("L", "c", "o", 7)
    r.core.end_of_input()
    assert r.out == [("c", ("o", "gold"), 7)]


def test_a_joiner_failing_on_a_waiting_record_goes_to_on_error_and_on() -> None:
    failed: list[Any] = []
    out: list[Any] = []

    def joiner(a: Any, b: Any) -> Any:
        if a == "bad":
            raise ValueError("no")
        return (a, b)

    core = TemporalJoinCore(
        "left", joiner, None, 0, DictState(), lambda *r: out.append(r[1]),
        on_error=lambda e, k, v, ts, off: failed.append((v, off)),
    )  # fmt: skip
    core.record("L", "c", "bad", 1, 10, pos=1)
    core.record("L", "c", "good", 2, 11, pos=2)
    core.record("L", "c", "later", 3, 12, pos=3)
    assert failed == [("bad", 10)] and out == [("good", None)]
    without_hook = TemporalJoinCore("left", joiner, None, 0, DictState(), lambda *r: None)
    without_hook.record("L", "c", "bad", 1, 10, pos=1)
    with pytest.raises(ValueError):
        without_hook.record("L", "c", "good", 2, 11, pos=2)


class _ManyState(DictState):
    """A dict state that reads many keys at once (as the engine's store does)."""

    def get_many(self, keys: list[Any]) -> list[Any]:
        return [self.data.get(k) for k in keys]


@pytest.mark.parametrize("seed", range(300))
def test_a_batch_of_records_equals_its_records_one_by_one(seed: int) -> None:
    # TemporalJoinCore.records (the engine's path) against record() per record, over
    # batches of random records: the same results (values, keys, times, offsets, order),
    # late and failed records, on_error calls and, after each batch, the same state.
    rnd = random.Random(seed)
    join_type = rnd.choice(["inner", "left", "outer"])
    emits = rnd.choice(["L", "R", "LR"])
    ttl = rnd.choice([None, 5, 20])
    grace = rnd.choice([0, 3])
    transient = rnd.random() < 0.5  # on_error raises the first time (a record stays)
    top, rows = 0, []
    for off in range(rnd.randint(1, 150)):
        top += rnd.choice([0, 0, 1, 2, 7])
        ts = max(0, top - rnd.choice([0, 0, 1, 2, 5, 12]))
        tag: tuple[Any, ...] = (rnd.choice("LR"), rnd.randint(0, 30))
        if rnd.random() < 0.9:
            tag += (rnd.randint(0, 3),)  # (a position; ties at equal ts)
        rows.append((rnd.choice(["a", "b", "c", None]), tag, ts, off))
    cuts = sorted(rnd.sample(range(1, len(rows) + 1), min(len(rows), rnd.randint(1, 6))))

    def joiner(a: Any, b: Any) -> Any:
        if a == 13 or b == 13:
            raise ValueError("thirteen")
        return (a, b)

    def core(out: list[Any], errors: list[Any], state: DictState) -> TemporalJoinCore:
        seen: set[int] = set()

        def on_error(e: Exception, k: Any, v: Any, ts: int, off: int) -> None:
            errors.append((k, v, ts, off))
            if transient and off not in seen:
                seen.add(off)
                raise RuntimeError("stays waiting")

        c = TemporalJoinCore(
            join_type, joiner, ttl, grace, state, lambda *r: out.append(r),
            emits=emits, on_error=on_error,
        )  # fmt: skip
        c.restore()
        return c

    one: list[Any] = []
    folded: list[Any] = []
    err1: list[Any] = []
    err2: list[Any] = []
    kind = rnd.choice([DictState, _ManyState])
    s1, s2 = kind(), kind()
    c1, c2 = core(one, err1, s1), core(folded, err2, s2)
    late1: list[int] = []
    late2: list[int] = []
    failed1: list[int] = []
    failed2: list[int] = []
    nulls2 = 0
    start, wm = 0, None
    for cut in cuts:
        batch = rows[start:cut]
        if rnd.random() < 0.5:  # a watermark for this batch (it may move in between)
            wm = max(wm or 0, max(ts for _, _, ts, _ in batch) - rnd.randint(0, 8))
            if rnd.random() < 0.3:
                moved: list[bool | None] = []
                for c in (c1, c2):
                    try:
                        moved.append(c.advance(wm - 1))
                    except RuntimeError:
                        moved.append(None)
                assert moved[0] == moved[1]
        else:
            wm = None
        for k, tag, ts, off in batch:
            try:
                if not c1.record(tag[0], k, tag[1], ts, off, wm, *tag[2:]):
                    late1.append(off)
            except Exception:
                failed1.append(off)
        offsets = [r[3] for r in batch]

        def failed(i: int, e: Exception) -> None:
            failed2.append(offsets[i])  # noqa: B023 (called within the loop's turn)

        late, nulls = c2.records(
            [r[0] for r in batch], [r[1] for r in batch], [r[2] for r in batch],
            offsets, wm, failed,
        )  # fmt: skip
        late2 += [batch[i][3] for i in late]
        nulls2 += nulls
        assert folded == one and err2 == err1
        assert late2 == late1 and failed2 == failed1
        assert s2.data == s1.data
        assert (c2.time, c2.max_time) == (c1.time, c1.max_time)
        assert sorted(c2.waiting) == sorted(c1.waiting) and c2.sizes() == c1.sizes()
        start = cut
    assert nulls2 == sum(r[0] is None for r in rows[:start])
    for c in (c1, c2):
        for _ in rows:  # (a raising on_error stops it: again, until none is left)
            try:
                c.end_of_input()
                break
            except RuntimeError:
                pass
    assert folded == one and err2 == err1 and s2.data == s1.data
