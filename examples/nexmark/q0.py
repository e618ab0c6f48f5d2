"""Nexmark q0, pass-through: every event in, every event out (the floor of each mode's
cost). Key: the event's identity, ``["person", id]``, ``["auction", id]`` or
``["bid", auction, bidder, dateTime]``; value: the event.

    rstreams run examples/nexmark/q0.py --input events.jsonl --output q0.jsonl
"""

from rstreams import StreamBuilder


def event_key(e: dict) -> tuple:
    """The identity of a Nexmark event (unique in the generator's output)."""
    if e["event_type"] == 0:
        return ("person", e["person"]["id"])
    if e["event_type"] == 1:
        return ("auction", e["auction"]["id"])
    bid = e["bid"]
    return ("bid", bid["auction"], bid["bidder"], bid["dateTime"])


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q0")
    b.source("events", deserializer="json").keyBy(event_key).toRStream().sink("q0")
    return b
