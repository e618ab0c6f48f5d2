"""Sessionized clicks: clicks per user session (sessions end after 30 min without clicks).

Input: JSON lines ``{"user": ..., "page": ..., "ts": <epoch ms>}``.

    rstreams run examples/sessions.py --input examples/data/clicks.jsonl
"""

from datetime import timedelta

from rstreams import SessionWindow, StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("sessions")
    (
        b.source("clicks", deserializer="json")
        .selectTimestamp(lambda click: click["ts"])
        .keyBy(lambda click: click["user"])
        .window(SessionWindow(timedelta(minutes=30), grace=timedelta(minutes=10)), emit="close")
        .count(name="clicks-per-session")
        .sink("session-clicks")
    )
    return b
