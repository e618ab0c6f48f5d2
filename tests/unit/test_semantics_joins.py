"""The windowed join state machine of the semantics core, driven with a dict state
(joins without window: test_semantics_temporal.py)."""

from __future__ import annotations

from typing import Any

from rstreams.dsl.windows import JoinWindow
from rstreams.semantics.joins import JoinCore
from rstreams.semantics.nullkeys import null_key_pair
from rstreams.semantics.timing import DictState


class Run:
    def __init__(self, join_type: str, window: Any) -> None:
        self.out: list[tuple[Any, Any, int]] = []
        self.state = DictState()
        self.core = JoinCore(join_type, lambda a, b: (a, b), window, self.state, self._emit)
        self.seq = 0

    def _emit(self, key: Any, value: Any, ts: int, off: int) -> None:
        self.out.append((key, value, ts))

    def feed(self, side: str, key: Any, value: Any, ts: int) -> bool:
        self.seq += 1
        return self.core.record(side, key, value, ts, self.seq)


def test_windowed_inner_join_matches_within_the_window_at_the_later_timestamp() -> None:
    r = Run("inner", JoinWindow(10, 0))
    r.feed("R", "k", "r1", 5)
    r.feed("L", "k", "l1", 12)  # right records in [2, 12]
    r.feed("L", "k", "l2", 30)  # [20, 30]: nothing
    assert r.out == [("k", ("l1", "r1"), 12)]


def test_left_join_emits_the_unmatched_when_they_expire_or_at_end_of_input() -> None:
    r = Run("left", JoinWindow(5, 5))
    r.feed("L", "a", "l1", 0)
    r.feed("L", "b", "l2", 100)  # stream time 100: l1's buffer (0 + 5 + 5 + 0 + 1) expired
    assert r.out == [("a", ("l1", None), 0)]
    r.core.end_of_input()
    assert r.out[-1] == ("b", ("l2", None), 100)
    assert r.state.data == {}


def test_a_late_record_joins_what_is_retained_but_is_not_buffered() -> None:
    r = Run("outer", JoinWindow(100, 100, grace=0))  # l1 is retained until 251
    r.feed("L", "k", "l1", 50)
    r.feed("R", "x", "rx", 200)  # stream time 200
    assert r.feed("R", "k", "late", 60) is False  # 60 + before 100 < 200: late
    assert ("k", ("l1", "late"), 60) in r.out
    assert not any(key[1] == "R" and key[2] == "k" for key in r.state.data)


def test_null_keys_never_match() -> None:
    r = Run("outer", JoinWindow(10, 10))
    r.feed("L", None, "l", 1)
    r.feed("R", None, "r", 1)
    assert r.out == [(None, ("l", None), 1), (None, (None, "r"), 1)]
    assert r.state.data == {}
    assert null_key_pair("inner", "L", "x") is None


def test_restore_rebuilds_buffers_and_heap() -> None:
    r = Run("left", JoinWindow(5, 5))
    r.feed("L", "a", "l1", 0)
    again = JoinCore("left", lambda a, b: (a, b), r.core.window, r.state, r._emit)
    again.restore()
    assert again.buffers == r.core.buffers and again.heap == r.core.heap
    again.end_of_input()
    assert r.out == [("a", ("l1", None), 0)]
