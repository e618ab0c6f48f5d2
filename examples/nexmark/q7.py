"""Nexmark q7, highest bid: per tumbling 10 s window of event time, the highest price
and the bids that offered it.

Key: the window (``{"key": "bids", "window": {"start", "end"}}``); value ``{"price",
"bids": [[auction, bidder], ...]}`` (the bids at that price, ascending). Events are out
of order by less than 4 s: the windows have 4 s of grace (Nexmark's watermark).

    rstreams run examples/nexmark/q7.py --input events.jsonl --output q7.jsonl
"""

from datetime import timedelta

from rstreams import StreamBuilder, TumblingWindow


def highest(acc: dict, bid: dict) -> dict:
    """Keep the highest price and every bid at it (sorted: any arrival order agrees)."""
    price, who = bid["price"], [bid["auction"], bid["bidder"]]
    if price > acc["price"]:
        return {"price": price, "bids": [who]}
    if price == acc["price"] and who not in acc["bids"]:
        return {"price": price, "bids": sorted([*acc["bids"], who])}
    return acc


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q7")
    (
        b.source("events", deserializer="json")
        .filter(lambda e: e["event_type"] == 2)
        .map(lambda e: e["bid"])
        .selectTimestamp(lambda bid: bid["dateTime"])
        .keyBy(lambda bid: "bids")
        .window(TumblingWindow(timedelta(seconds=10), grace=timedelta(seconds=4)))
        .aggregate(lambda: {"price": -1, "bids": []}, highest)
        .sink("q7")
    )
    return b
