"""Nexmark q8, monitor new users: the persons who opened an auction in the same
tumbling 10 s window of event time as they registered.

Key: ``[person id, window start]``; value the person's ``name``.

A windowed join of persons and auctions on ``(id, window start)`` with
``(seller, window start)``: two records of one 10 s window are less than 10 s apart, so
a join window of 10 s each way holds every pair the tumbling window does, and the key
keeps out pairs of neighbouring windows. Grace 4 s (Nexmark's watermark).

    rstreams run examples/nexmark/q8.py --input events.jsonl --output q8.jsonl
"""

from datetime import timedelta

from rstreams import JoinWindow, StreamBuilder

#: The tumbling window, in ms.
SIZE = 10_000


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q8")
    events = b.source("events", deserializer="json")
    persons = (
        events.filter(lambda e: e["event_type"] == 0)
        .map(lambda e: e["person"])
        .selectTimestamp(lambda p: p["dateTime"])
    )
    auctions = (
        events.filter(lambda e: e["event_type"] == 1)
        .map(lambda e: e["auction"])
        .selectTimestamp(lambda a: a["dateTime"])
    )
    (
        persons.join(auctions)
        .where(lambda p: (p["id"], p["dateTime"] - p["dateTime"] % SIZE))
        .equalTo(lambda a: (a["seller"], a["dateTime"] - a["dateTime"] % SIZE))
        .window(JoinWindow(before=SIZE, after=SIZE, grace=timedelta(seconds=4)))
        .apply(lambda p, a: p["name"])
        .sink("q8")
    )
    return b
