"""Clicks per user per 30 s: the store keeps its name, but its windows have other
bounds (and a longer grace, which alone would be harmless)."""

from rstreams import StreamBuilder, TumblingWindow


def build() -> StreamBuilder:
    b = StreamBuilder("clicks")
    (
        b.source("clicks", "json")
        .selectTimestamp(lambda c: c["ts"])
        .keyBy(lambda c: c["user"])
        .window(TumblingWindow(30_000, grace=10_000))
        .count(name="per-user")
        .sink("clicks-per-user")
    )
    return b
