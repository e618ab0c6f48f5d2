"""Orders joined with payments; the join step has no name."""

from rstreams import JoinWindow, StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("shop")
    orders = b.source("orders", "json")
    payments = b.source("payments", "json")
    (
        orders.join(payments)
        .where(lambda o: o["id"])
        .equalTo(lambda p: p["order"])
        .window(JoinWindow(before=0, after=60_000))
        .apply(lambda o, p: {"order": o["id"], "paid": p["amount"]})
        .sink("paid-orders")
    )
    return b
