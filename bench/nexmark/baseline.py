"""The plainest Python that answers each Nexmark query: one process, dicts and loops,
reading the events file and writing the same JSON lines as ``rstreams run
examples/nexmark/qN.py --output`` (through the same writer, so the bytes compare). The
speed reference of bench/nexmark, and the expected tables of tests/integration/
test_nexmark.py.

    python bench/nexmark/baseline.py q7 events.jsonl q7.jsonl
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from rstreams.runtime.results import table_lines
from rstreams.windowed import Windowed

#: Window size, advance and gap of the queries, in ms (as examples/nexmark/q*.py).
TUMBLE = 10_000
SESSION_GAP = 10_000
HOP_SIZE, HOP_ADVANCE = 10_000, 2_000
#: How long a version of a temporal join stays valid (the joins' default ttl: 24 h).
TTL = 24 * 3600 * 1000


def _events(path: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _bids(path: str) -> Iterator[dict[str, Any]]:
    for e in _events(path):
        if e["event_type"] == 2:
            yield e["bid"]


def q0(path: str) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for e in _events(path):
        t = e["event_type"]
        if t == 0:
            out[("person", e["person"]["id"])] = e
        elif t == 1:
            out[("auction", e["auction"]["id"])] = e
        else:
            b = e["bid"]
            out[("bid", b["auction"], b["bidder"], b["dateTime"])] = e
    return out


def q1(path: str) -> dict[Any, Any]:
    return {
        (b["auction"], b["bidder"], b["dateTime"]): {
            "auction": b["auction"],
            "bidder": b["bidder"],
            "price": 0.908 * b["price"],
            "dateTime": b["dateTime"],
        }
        for b in _bids(path)
    }


def q2(path: str) -> dict[Any, Any]:
    return {
        (b["auction"], b["bidder"], b["dateTime"]): b["price"]
        for b in _bids(path)
        if b["auction"] % 123 == 0
    }


def q3(path: str) -> dict[Any, Any]:
    # Each auction meets its seller as of its (dateTime, line): the person's record at or
    # before it in event time (the line number breaks ties), at most TTL older.
    sellers: dict[int, tuple[int, int, dict[str, Any]]] = {}
    auctions: list[tuple[int, dict[str, Any]]] = []
    for line, e in enumerate(_events(path)):
        if e["event_type"] == 0 and e["person"]["state"] in ("OR", "ID", "CA"):
            p = e["person"]
            sellers[p["id"]] = (p["dateTime"], line, p)
        elif e["event_type"] == 1 and e["auction"]["category"] == 10:
            auctions.append((line, e["auction"]))
    out: dict[Any, Any] = {}
    for line, a in auctions:
        seller = sellers.get(a["seller"])
        if seller is None:
            continue
        t, at, p = seller
        if (t, at) <= (a["dateTime"], line) and t + TTL >= a["dateTime"]:
            out[a["id"]] = {"name": p["name"], "city": p["city"], "state": p["state"]}
    return out


def _open_bids(path: str) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """The auctions by id, and the bids made while their auction was open."""
    auctions: dict[int, dict[str, Any]] = {}
    bids: list[dict[str, Any]] = []
    for e in _events(path):
        if e["event_type"] == 1:
            auctions[e["auction"]["id"]] = e["auction"]
        elif e["event_type"] == 2:
            bids.append(e["bid"])
    valid = [
        b
        for b in bids
        if (a := auctions.get(b["auction"])) is not None
        and a["dateTime"] <= b["dateTime"] <= a["expires"]
        and a["dateTime"] + TTL >= b["dateTime"]
    ]
    return auctions, valid


def q4(path: str) -> dict[Any, Any]:
    auctions, bids = _open_bids(path)
    winning: dict[int, int] = {}
    for b in bids:
        if b["price"] > winning.get(b["auction"], -1):
            winning[b["auction"]] = b["price"]
    per_category: dict[int, list[int]] = {}
    for auction, price in winning.items():
        per_category.setdefault(auctions[auction]["category"], []).append(price)
    return {c: sum(prices) // len(prices) for c, prices in per_category.items()}


def q5(path: str) -> dict[Any, Any]:
    counts: dict[int, dict[int, int]] = {}  # window start -> auction -> bids
    for b in _bids(path):
        t = b["dateTime"]
        start = t - t % HOP_ADVANCE
        while start > t - HOP_SIZE and start >= 0:
            window = counts.setdefault(start, {})
            window[b["auction"]] = window.get(b["auction"], 0) + 1
            start -= HOP_ADVANCE
    out: dict[Any, Any] = {}
    for start, window in counts.items():
        num = max(window.values())
        out[Windowed("bids", start, start + HOP_SIZE)] = {
            "auctions": sorted(a for a, c in window.items() if c == num),
            "num": num,
        }
    return out


def q7(path: str) -> dict[Any, Any]:
    best: dict[int, tuple[int, list[list[int]]]] = {}
    for b in _bids(path):
        start = b["dateTime"] - b["dateTime"] % TUMBLE
        price, who = b["price"], [b["auction"], b["bidder"]]
        top = best.get(start)
        if top is None or price > top[0]:
            best[start] = (price, [who])
        elif price == top[0] and who not in top[1]:
            top[1].append(who)
    return {
        Windowed("bids", s, s + TUMBLE): {"price": p, "bids": sorted(w)}
        for s, (p, w) in best.items()
    }


def q8(path: str) -> dict[Any, Any]:
    names: dict[tuple[int, int], str] = {}  # (person, window start) -> name
    sellers: set[tuple[int, int]] = set()  # (seller, window start) of each auction
    for e in _events(path):
        if e["event_type"] == 0:
            p = e["person"]
            names[(p["id"], p["dateTime"] - p["dateTime"] % TUMBLE)] = p["name"]
        elif e["event_type"] == 1:
            a = e["auction"]
            sellers.add((a["seller"], a["dateTime"] - a["dateTime"] % TUMBLE))
    return {k: name for k, name in names.items() if k in sellers}


def q9(path: str) -> dict[Any, Any]:
    _, bids = _open_bids(path)
    best: dict[int, dict[str, Any]] = {}
    for b in bids:
        top = best.get(b["auction"])
        rank = (-b["price"], b["dateTime"], b["bidder"])
        if top is None or rank < (-top["price"], top["dateTime"], top["bidder"]):
            best[b["auction"]] = b
    return {
        a: {"bidder": b["bidder"], "price": b["price"], "dateTime": b["dateTime"]}
        for a, b in best.items()
    }


def q11(path: str) -> dict[Any, Any]:
    times: dict[int, list[int]] = {}
    for b in _bids(path):
        times.setdefault(b["bidder"], []).append(b["dateTime"])
    out: dict[Any, Any] = {}
    for bidder, ts in times.items():
        ts.sort()
        first = last = ts[0]
        count = 0
        for t in ts:
            if t - last > SESSION_GAP:
                out[Windowed(bidder, first, last)] = {"count": count, "end": last}
                first, count = t, 0
            last = t
            count += 1
        out[Windowed(bidder, first, last)] = {"count": count, "end": last}
    return out


QUERIES: dict[str, Callable[[str], dict[Any, Any]]] = {
    "q0": q0, "q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q7": q7, "q8": q8,
    "q9": q9, "q11": q11,
}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    query, events, out = (argv if argv is not None else sys.argv[1:])[:3]
    table = QUERIES[query](events)
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(table_lines(table))


if __name__ == "__main__":
    main()
