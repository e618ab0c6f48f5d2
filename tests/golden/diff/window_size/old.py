"""Clicks per user per minute."""

from rstreams import StreamBuilder, TumblingWindow


def build() -> StreamBuilder:
    b = StreamBuilder("clicks")
    (
        b.source("clicks", "json")
        .selectTimestamp(lambda c: c["ts"])
        .keyBy(lambda c: c["user"])
        .window(TumblingWindow(60_000, grace=5_000))
        .count(name="per-user")
        .sink("clicks-per-user")
    )
    return b
