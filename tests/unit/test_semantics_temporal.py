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
