"""Nexmark q2, selection: the bids on auctions whose id is a multiple of 123.

Key ``[auction, bidder, dateTime]``; value the price.

    rstreams run examples/nexmark/q2.py --input events.jsonl --output q2.jsonl
"""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q2")
    (
        b.source("events", deserializer="json")
        .filter(lambda e: e["event_type"] == 2 and e["bid"]["auction"] % 123 == 0)
        .map(lambda e: e["bid"])
        .keyBy(lambda bid: (bid["auction"], bid["bidder"], bid["dateTime"]))
        .toRStream()
        .map(lambda bid: bid["price"])
        .sink("q2")
    )
    return b
