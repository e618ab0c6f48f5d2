"""Nexmark q1, currency conversion: every bid, its price in euros (0.908 of dollars).

Key ``[auction, bidder, dateTime]``; value ``{"auction", "bidder", "price", "dateTime"}``.

    python bench/nexmark/generate.py --events 100000 --out events.jsonl
    rstreams run examples/nexmark/q1.py --input events.jsonl --output q1.jsonl
"""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q1")
    (
        b.source("events", deserializer="json")
        .filter(lambda e: e["event_type"] == 2)
        .map(lambda e: e["bid"])
        .keyBy(lambda bid: (bid["auction"], bid["bidder"], bid["dateTime"]))
        .toRStream()
        .map(
            lambda bid: {
                "auction": bid["auction"],
                "bidder": bid["bidder"],
                "price": 0.908 * bid["price"],
                "dateTime": bid["dateTime"],
            }
        )
        .sink("q1")
    )
    return b
