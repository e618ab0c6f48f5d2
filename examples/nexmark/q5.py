"""Nexmark q5, hot items: per hopping window of 10 s advancing every 2 s, the auctions
that got the most bids.

Key: the window (``{"key": "bids", "window": {"start", "end"}}``); value ``{"auctions":
[ids, ascending], "num": their bid count}``. Grace 4 s (Nexmark's watermark).

    rstreams run examples/nexmark/q5.py --input events.jsonl --output q5.jsonl
"""

from datetime import timedelta
from typing import Any

from rstreams import HoppingWindow, StreamBuilder


def tally(acc: dict[int, int], bid: dict[str, Any]) -> dict[int, int]:
    """Bids per auction in the window. The dict is updated in place and returned (an
    accumulator may be: a copy per bid would cost the whole dict per record)."""
    acc[bid["auction"]] = acc.get(bid["auction"], 0) + 1
    return acc


def hottest(counts: dict[int, int]) -> dict[str, Any]:
    num = max(counts.values())
    return {"auctions": sorted(a for a, c in counts.items() if c == num), "num": num}


def build() -> StreamBuilder:
    b = StreamBuilder("nexmark-q5")
    (
        b.source("events", deserializer="json")
        .filter(lambda e: e["event_type"] == 2)
        .map(lambda e: e["bid"])
        .selectTimestamp(lambda bid: bid["dateTime"])
        .keyBy(lambda bid: "bids")
        .window(
            HoppingWindow(timedelta(seconds=10), timedelta(seconds=2), grace=timedelta(seconds=4))
        )
        .aggregate(dict, tally)
        .toRStream()
        .map(hottest)
        .sink("q5")
    )
    return b
