"""Nexmark q4, average price per category: each auction's winning price (its highest
bid made while it was open: ``auction.dateTime <= bid.dateTime <= auction.expires``),
then per category the average winning price of its auctions that had such a bid.

Key: the ``category``; value the average, ``sum // count`` (SQL's ``AVG`` of integers).

Each bid meets its auction as of the bid's ``dateTime`` (a stream-table join on event
time: ``bids.join(auctions.toTable())``), which a bid made before its auction opened
does not. Then per category a running dict of each auction's highest valid price. An
auction is valid for the join's ``ttl`` (24 h of event time, the default): auctions
that stay open longer need a larger ``ttl=``. Grace 4 s (Nexmark's watermark).

    rstreams run examples/nexmark/q4.py --input events.jsonl --output q4.jsonl
"""

from datetime import timedelta
from typing import Any

from rstreams import StreamBuilder


def open_bid(bid: dict[str, Any], auction: dict[str, Any]) -> dict[str, Any] | None:
    """The bid with its auction's category if the auction was open at the bid, else None."""
    if bid["dateTime"] > auction["expires"]:
        return None
    return {"auction": auction["id"], "category": auction["category"], "price": bid["price"]}


def highest(acc: dict[int, int], bid: dict[str, Any]) -> dict[int, int]:
    """The highest price per auction of the category. The dict is updated in place and
    returned (an accumulator may be: copying every auction of a category per bid would
    cost a copy of the whole dict per record)."""
    if bid["price"] > acc.get(bid["auction"], -1):
        acc[bid["auction"]] = bid["price"]
    return acc


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q4")
    events = b.source("events", deserializer="json")
    bids = (
        events.filter(lambda e: e["event_type"] == 2)
        .map(lambda e: e["bid"])
        .selectTimestamp(lambda bid: bid["dateTime"])
    )
    auctions = (
        events.filter(lambda e: e["event_type"] == 1)
        .map(lambda e: e["auction"])
        .selectTimestamp(lambda a: a["dateTime"])
    )
    (
        bids.join(auctions.toTable())
        .where(lambda bid: bid["auction"])
        .equalTo(lambda a: a["id"])
        .apply(open_bid, grace=timedelta(seconds=4))
        .filter(lambda bid: bid is not None)
        .keyBy(lambda bid: bid["category"])
        .aggregate(dict, highest)
        .toRStream()
        .map(lambda prices: sum(prices.values()) // len(prices))
        .sink("q4")
    )
    return b
