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
    "q0": q0, "q1": q1, "q2": q2, "q7": q7, "q11": q11,
}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    query, events, out = (argv if argv is not None else sys.argv[1:])[:3]
    table = QUERIES[query](events)
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(table_lines(table))


if __name__ == "__main__":
    main()
