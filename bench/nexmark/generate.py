"""Nexmark events as JSON lines: the input of examples/nexmark/q*.py and of the baseline.

Modelled on Nexmark's generator (the NEXMark paper; Apache Beam's and Flink's suites):
event ``n`` is a person, an auction or a bid in the proportions 1:3:46 (``n % 50``);
new auctions are sold by recent (hot) sellers a quarter of the time, bids go to the
newest (hot) auction half of the time and come from a hot bidder a quarter of the time;
an auction lives 4 to 20 s of event time. Event time (``dateTime``, epoch ms) advances
``1000 / rate`` ms per event and is out of order by less than 4 s (Nexmark's watermark
is ``dateTime - 4 s``); a bid's ``(auction, bidder, dateTime)`` is unique, so the
queries keyed by it have one answer. The same seed gives the same file.

    python bench/nexmark/generate.py --events 100000 --out events.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from typing import Any

FIRST = [
    "Peter",
    "Paul",
    "Luke",
    "John",
    "Saul",
    "Vicky",
    "Kate",
    "Julie",
    "Sarah",
    "Deiter",
    "Walter",
]
LAST = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]
CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend",
          "Redmond", "Seattle", "Kent", "Cheyenne"]  # fmt: skip
STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
#: Ids start here (as Nexmark's FIRST_PERSON_ID / FIRST_AUCTION_ID).
FIRST_ID = 1000
BASE_TIME = 1_700_000_000_000


def events(count: int, *, seed: int = 1, rate: int = 1000) -> Iterator[dict[str, Any]]:
    """The first ``count`` events, ``rate`` events per second of event time."""
    rng = random.Random(seed)
    persons = auctions = 0
    used: set[tuple[int, int, int]] = set()
    step = 1000 / rate
    for n in range(count):
        at = BASE_TIME + int(n * step) - rng.randrange(0, 3000)  # (disorder < 4 s)
        kind = n % 50
        if kind == 0 or persons == 0:
            pid = FIRST_ID + persons
            persons += 1
            yield {"event_type": 0, "person": {
                "id": pid, "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                "emailAddress": f"user{pid}@example.com",
                "creditCard": " ".join(f"{rng.randrange(10000):04d}" for _ in range(4)),
                "city": rng.choice(CITIES), "state": rng.choice(STATES), "dateTime": at,
                "extra": "",
            }}  # fmt: skip
        elif kind <= 3 or auctions == 0:
            aid = FIRST_ID + auctions
            auctions += 1
            hot = rng.random() < 0.25
            seller = FIRST_ID + (persons - 1 - rng.randrange(min(persons, 10)) if hot
                                 else rng.randrange(persons))  # fmt: skip
            initial = rng.randrange(100, 10_000)
            yield {"event_type": 1, "auction": {
                "id": aid, "itemName": f"item-{aid}", "description": f"an item sold by {seller}",
                "initialBid": initial, "reserve": initial + rng.randrange(0, 5_000),
                "dateTime": at, "expires": at + rng.randrange(4_000, 20_000), "seller": seller,
                "category": 10 + rng.randrange(5), "extra": "",
            }}  # fmt: skip
        else:
            hot = rng.random() < 0.5
            auction = FIRST_ID + (auctions - 1 if hot else
                                  auctions - 1 - rng.randrange(min(auctions, 50)))  # fmt: skip
            bidder = FIRST_ID + (persons - 1 - rng.randrange(min(persons, 10))
                                 if rng.random() < 0.25 else rng.randrange(persons))  # fmt: skip
            while (auction, bidder, at) in used:
                at += 1
            used.add((auction, bidder, at))
            yield {"event_type": 2, "bid": {
                "auction": auction, "bidder": bidder, "price": rng.randrange(100, 100_000),
                "channel": rng.choice(CHANNELS), "url": f"https://example.com/{auction}",
                "dateTime": at, "extra": "",
            }}  # fmt: skip


def write(path: str, count: int, *, seed: int = 1, rate: int = 1000) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for event in events(count, seed=seed, rate=rate):
            f.write(json.dumps(event, separators=(",", ":")) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Write Nexmark events as JSON lines.")
    p.add_argument("--events", type=int, default=100_000, help="how many (default 100000)")
    p.add_argument("--out", default="events.jsonl", help="default events.jsonl")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", type=int, default=1000, help="events per second of event time")
    args = p.parse_args(argv)
    write(args.out, args.events, seed=args.seed, rate=args.rate)


if __name__ == "__main__":
    main()
