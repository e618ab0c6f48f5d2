"""Orders joined with their payments within 5 minutes; unpaid orders come out with
``paid: null`` once their window has closed (a left join).

    rstreams run examples/order_payment_join.py \\
        --bind orders=examples/data/orders.jsonl --bind payments=examples/data/payments.jsonl
"""

from datetime import timedelta

from rstreams import JoinWindow, StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("order-payment")
    orders = b.source("orders", deserializer="json").selectTimestamp(lambda o: o["ts"])
    payments = b.source("payments", deserializer="json").selectTimestamp(lambda p: p["ts"])
    (
        orders.leftJoin(payments)
        .where(lambda o: o["order"])
        .equalTo(lambda p: p["order"])
        # Grace: the two files are read one after the other, so payments arrive "late"
        # relative to the orders read before them; an hour of grace absorbs that.
        .window(JoinWindow(timedelta(0), timedelta(minutes=5), grace=timedelta(hours=1)))
        .apply(
            lambda o, p: {"amount": o["amount"], "paid": None if p is None else p["paid"]},
            name="paid",
        )
        .sink("order-payments")
    )
    return b
