"""Uneven queues: a left join of two topics with different queue counts.

Orders (2 queues: 2 producers) and payments (1 queue: 1 producer) meet in a join with
3 queues. A payment up to 50 ms after its order matches it; one that comes later,
or never, leaves its order ``unpaid``. Each file is in time order; every backend must
give the same table (tests/integration/test_conformance_embedded.py,
tests/spark/test_conformance.py).
"""

from __future__ import annotations

import json
import random

from rstreams import JoinWindow, StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("uneven-join")
    orders = b.source("orders", queues=2).map(json.loads).selectTimestamp(lambda o: o["t"])
    payments = b.source("payments", queues=1).map(json.loads).selectTimestamp(lambda p: p["t"])
    (
        orders.leftJoin(payments)
        .where(lambda o: o["k"])
        .equalTo(lambda p: p["k"])
        .window(JoinWindow(before=0, after=50, grace=2000))
        .apply(lambda o, p: p["id"] if p else "unpaid", name="paid", queues=3)
        .sink("paid")
    )
    return b


def lines() -> dict[str, list[str]]:
    """Orders every 0-10 ms; two in three paid 0 to 80 ms later."""
    rnd = random.Random(29)
    orders, pays, t = [], [], 0
    for i in range(120):
        t += rnd.randint(0, 10)
        key = f"o{i}"
        orders.append(json.dumps({"id": i, "k": key, "t": t}))
        if i % 3:
            pays.append((t + rnd.randint(0, 80), key, i))
    payments = [json.dumps({"id": f"p{i}", "k": key, "t": pt}) for pt, key, i in sorted(pays)]
    return {"orders": orders, "payments": payments}
