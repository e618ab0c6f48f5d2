"""Sessionized clicks: clicks per user session (sessions end after 30 min without clicks).

Input: JSON lines ``{"user": ..., "page": ..., "ts": <epoch ms>}``, as several web
servers log them: up to 2 minutes out of order, which the 10 minutes of grace absorb.
One final count per session, once event time has passed its last click by 30 minutes
plus grace, or at the end of the input.

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
