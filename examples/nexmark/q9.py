"""Nexmark q9, winning bids: each auction's winning bid, the highest price made while
it was open (``auction.dateTime <= bid.dateTime <= auction.expires``), ties to the
earliest ``dateTime``, then to the lowest bidder.

Key: the auction ``id``; value ``{"bidder", "price", "dateTime"}``.

Each bid meets its auction as of the bid's ``dateTime`` (a stream-table join on event
time: ``bids.join(auctions.toTable())``), then a ``reduce`` per auction keeps the best.
An auction is valid for the join's ``ttl`` (24 h of event time, the default). Grace 4 s
(Nexmark's watermark).

    rstreams run examples/nexmark/q9.py --input events.jsonl --output q9.jsonl
"""

from datetime import timedelta
from typing import Any

from rstreams import StreamBuilder


def open_bid(bid: dict[str, Any], auction: dict[str, Any]) -> dict[str, Any] | None:
    """The bid if its auction was open at the bid's time, else None."""
    if bid["dateTime"] > auction["expires"]:
        return None
    return {"auction": bid["auction"], "bidder": bid["bidder"], "price": bid["price"],
            "dateTime": bid["dateTime"]}  # fmt: skip


def rank(bid: dict[str, Any]) -> tuple[int, int, int]:
    """Smaller is better: the higher price, then the earlier time, then the lower bidder."""
    return -bid["price"], bid["dateTime"], bid["bidder"]


def better(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The winner of two bids (the same whichever comes first)."""
    return a if rank(a) <= rank(b) else b


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q9")
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
        .keyBy(lambda bid: bid["auction"])
        .reduce(better)
        .toRStream()
        .map(lambda bid: {k: bid[k] for k in ("bidder", "price", "dateTime")})
        .sink("q9")
    )
    return b
