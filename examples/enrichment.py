"""Orders enriched with their customer's tier as of the order's time (a temporal join).

Input: one file of JSON lines, customers (``{"type": "customer", "id": "c1", "tier":
"gold", "ts": <epoch ms>}``, a new line whenever a tier changes) and orders
(``{"type": "order", "order": 7, "customer": "c1", "amount": 66.14, "ts": ...}``, up to
20 s out of order). Each order meets the customer's version as of its own time, whatever
came first in the file or how the run split it; an order of an unknown customer comes
out with ``tier: null`` (a left join).

    rstreams run examples/enrichment.py --input examples/data/shop.jsonl
"""

from datetime import timedelta

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("enrichment")
    events = b.source("shop", deserializer="json").selectTimestamp(lambda e: e["ts"])
    orders = events.filter(lambda e: e["type"] == "order")
    customers = events.filter(lambda e: e["type"] == "customer")
    (
        orders.leftJoin(customers.toTable())  # customers only stored: orders emit
        .where(lambda o: o["customer"])
        .equalTo(lambda c: c["id"])
        .apply(
            lambda o, c: {
                "order": o["order"],
                "amount": o["amount"],
                "tier": None if c is None else c["tier"],
            },
            name="enrich",
            grace=timedelta(seconds=30),  # orders come up to 20 s out of order
        )
        .keyBy(lambda o: o["order"])
        .sink("enriched-orders")
    )
    return b
