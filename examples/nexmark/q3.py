"""Nexmark q3, local item suggestion: the auctions of category 10 whose seller lives in
Oregon, Idaho or California, with the seller's name, city and state.

Key: the auction ``id``; value ``{"name", "city", "state"}``.

A stream-table join on event time (a temporal join): each auction meets its seller's
person record as of the auction's ``dateTime`` (``auctions.join(persons.toTable())``),
so the answer does not depend on the order the two arrive in, nor on how a run splits
its input. A person record is valid for the join's ``ttl`` (24 h of event time, the
default). Events are out of order by less than 4 s: the join waits that long (grace).

    rstreams run examples/nexmark/q3.py --input events.jsonl --output q3.jsonl
"""

from datetime import timedelta

from rstreams import StreamBuilder

#: The sellers' states q3 looks for.
STATES = ("OR", "ID", "CA")


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q3")
    events = b.source("events", deserializer="json")
    auctions = (
        events.filter(lambda e: e["event_type"] == 1 and e["auction"]["category"] == 10)
        .map(lambda e: e["auction"])
        .selectTimestamp(lambda a: a["dateTime"])
    )
    sellers = (
        events.filter(lambda e: e["event_type"] == 0 and e["person"]["state"] in STATES)
        .map(lambda e: e["person"])
        .selectTimestamp(lambda p: p["dateTime"])
    )
    (
        auctions.join(sellers.toTable())
        .where(lambda a: a["seller"])
        .equalTo(lambda p: p["id"])
        .apply(
            lambda a, p: [a["id"], {"name": p["name"], "city": p["city"], "state": p["state"]}],
            grace=timedelta(seconds=4),
        )
        .keyBy(lambda pair: pair[0])  # the join's key is the seller: key by auction
        .toRStream()
        .map(lambda pair: pair[1])
        .sink("q3")
    )
    return b
