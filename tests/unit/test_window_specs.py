"""Window specs: durations as int milliseconds or timedelta, errors that name the
parameter, the value and the unit, and the units in describe() and to_dot()."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from rstreams import (
    HoppingWindow,
    JoinWindow,
    SessionWindow,
    SlidingWindow,
    StreamBuilder,
    TopologyError,
    TumblingWindow,
)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TumblingWindow(-60), "TumblingWindow size must not be negative; got -60 ms"),
        (lambda: TumblingWindow(0), "TumblingWindow size must be positive; got 0 ms"),
        (
            lambda: TumblingWindow(10, grace=-1),
            "TumblingWindow grace must not be negative; got -1 ms",
        ),
        (lambda: HoppingWindow(-10, 5), "HoppingWindow size must not be negative; got -10 ms"),
        (lambda: HoppingWindow(10, 0), "HoppingWindow advance must be positive; got 0 ms"),
        (
            lambda: HoppingWindow(10, 5, grace=-2),
            "HoppingWindow grace must not be negative; got -2 ms",
        ),
        (lambda: SlidingWindow(10, -5), "HoppingWindow advance must not be negative; got -5 ms"),
        (lambda: SessionWindow(-30), "SessionWindow gap must not be negative; got -30 ms"),
        (lambda: SessionWindow(0), "SessionWindow gap must be positive; got 0 ms"),
        (lambda: SessionWindow(5, grace=-3), "SessionWindow grace must not be negative; got -3 ms"),
        (lambda: JoinWindow(-1, 5), "JoinWindow before must not be negative; got -1 ms"),
        (lambda: JoinWindow(1, -5), "JoinWindow after must not be negative; got -5 ms"),
        (lambda: JoinWindow(1, 5, grace=-7), "JoinWindow grace must not be negative; got -7 ms"),
        (
            lambda: SessionWindow(timedelta(seconds=-2)),
            "SessionWindow gap must not be negative; got -2000 ms",
        ),
        (
            lambda: TumblingWindow(60.0),
            "TumblingWindow size must be milliseconds (int) or a datetime.timedelta; "
            "got float 60.0",
        ),
        (
            lambda: TumblingWindow(True),
            "TumblingWindow size must be milliseconds (int) or a datetime.timedelta; got bool True",
        ),
        (
            lambda: TumblingWindow(timedelta(microseconds=1500)),
            "TumblingWindow size must be a whole number of milliseconds; "
            "got datetime.timedelta(microseconds=1500) (1.5 ms)",
        ),
    ],
)
def test_errors_name_the_parameter_the_value_and_the_unit(make: Any, message: str) -> None:
    with pytest.raises(TopologyError, match=f"^{re.escape(message)}$"):
        make()


def test_every_duration_takes_a_timedelta_or_int_milliseconds() -> None:
    minute, second = timedelta(minutes=1), timedelta(seconds=1)
    assert TumblingWindow(minute, grace=second) == TumblingWindow(60_000, grace=1_000)
    assert HoppingWindow(minute, 10 * second, grace=second) == HoppingWindow(60_000, 10_000, 1_000)
    assert SlidingWindow(minute, 10 * second, grace=second) == HoppingWindow(60_000, 10_000, 1_000)
    assert SessionWindow(5 * minute, grace=second) == SessionWindow(300_000, grace=1_000)
    assert JoinWindow(second, 2 * second, grace=second) == JoinWindow(1_000, 2_000, 1_000)
    assert JoinWindow(timedelta(0), minute).before == 0


def test_str_of_a_spec_says_its_unit() -> None:
    assert str(TumblingWindow(timedelta(minutes=1))) == "tumbling size=60000 ms, grace=0 ms"
    assert str(HoppingWindow(10, 5, 2)) == "hopping size=10 ms, advance=5 ms, grace=2 ms"
    assert str(SessionWindow(30, grace=1)) == "session gap=30 ms, grace=1 ms"
    assert str(JoinWindow(1, 2)) == "join before=1 ms, after=2 ms, grace=0 ms"


def _windowed_topology() -> Any:
    b = StreamBuilder("clicks")
    clicks = b.source("clicks", "json").selectTimestamp(lambda c: c["ts"])
    (
        clicks.keyBy(lambda c: c["user"])
        .window(TumblingWindow(timedelta(minutes=1), grace=5_000))
        .count(name="per-user")
        .sink("per-user")
    )
    orders = b.source("orders", "json")
    (
        clicks.join(orders)
        .where(lambda c: c["user"])
        .equalTo(lambda o: o["user"])
        .window(JoinWindow(before=0, after=timedelta(seconds=30)))
        .apply(lambda c, o: o, name="bought")
        .sink("bought")
    )
    return b.build()


def test_describe_shows_each_window_with_its_unit() -> None:
    lines = _windowed_topology().describe().splitlines()
    assert (
        "    Processor: per-user [window-aggregate] "
        "(window: tumbling size=60000 ms, grace=5000 ms) (stores: [clicks-per-user-store])"
    ) in lines
    assert (
        "    Processor: bought [join] (inner windowed join, join before=0 ms, after=30000 ms, "
        "grace=0 ms) "
        "(stores: [clicks-bought-store])"
    ) in lines
    # Only the step itself, not its shuffle parts, shows the window.
    assert sum("(window: " in line or "windowed join, " in line for line in lines) == 2


def test_dot_labels_show_each_window_with_its_unit() -> None:
    dot = _windowed_topology().to_dot()
    assert '[label="per-user\\n[window-aggregate]\\ntumbling size=60000 ms, grace=5000 ms"' in dot
    assert (
        '[label="bought\\n[join]\\ninner windowed join, join before=0 ms, after=30000 ms, '
        'grace=0 ms"'
    ) in dot
