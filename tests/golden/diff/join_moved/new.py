"""Test orders are dropped before the join: the join moves one place down and its
store would start empty; the sink's serializer changes too (its records are read back
with it)."""

from rstreams import JoinWindow, StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("shop")
    orders = b.source("orders", "json").filter(lambda o: not o.get("test"))
    payments = b.source("payments", "json")
    (
        orders.join(payments)
        .where(lambda o: o["id"])
        .equalTo(lambda p: p["order"])
        .window(JoinWindow(before=0, after=60_000))
        .apply(lambda o, p: {"order": o["id"], "paid": p["amount"]})
        .sink("paid-orders", "msgpack")
    )
    return b
