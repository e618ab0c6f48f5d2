"""Nexmark q11, user sessions: per bidder, sessions of bids at most 10 s apart.

Key: the bidder and its session (``{"key": bidder, "window": {"start", "end"}}``, the
session's first and last bid times); value ``{"count", "end"}``. Grace 4 s.

    rstreams run examples/nexmark/q11.py --input events.jsonl --output q11.jsonl
"""

from datetime import timedelta

from rstreams import SessionWindow, StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q11")
    (
        b.source("events", deserializer="json")
        .filter(lambda e: e["event_type"] == 2)
        .map(lambda e: e["bid"])
        .selectTimestamp(lambda bid: bid["dateTime"])
        .keyBy(lambda bid: bid["bidder"])
        .window(SessionWindow(timedelta(seconds=10), grace=timedelta(seconds=4)))
        .aggregate(
            lambda: {"count": 0, "end": 0},
            lambda acc, bid: {"count": acc["count"] + 1, "end": max(acc["end"], bid["dateTime"])},
            merger=lambda a, c: {"count": a["count"] + c["count"], "end": max(a["end"], c["end"])},
        )
        .sink("q11")
    )
    return b
