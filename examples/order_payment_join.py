"""Orders joined with their payments within 5 minutes; unpaid orders come out with
``paid: null`` once their window has closed (a left join).

Input: two files of JSON lines, ``orders`` (``{"order": 1001, "amount": 66.14, "ts":
<epoch ms>}``, in time order) and ``payments`` (``{"order": 1001, "paid": 66.14, "ts":
...}``, up to a minute out of order). An order paid more than 5 minutes after it was
placed, or never paid, comes out unmatched.

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
        # Grace: payments are reported up to a minute out of order; 2 minutes lets each
        # one meet its order. (Reading one file before the other needs none: each
        # input's time is tracked apart, and a join waits for both.)
        .window(JoinWindow(timedelta(0), timedelta(minutes=5), grace=timedelta(minutes=2)))
        .apply(
            lambda o, p: {"amount": o["amount"], "paid": None if p is None else p["paid"]},
            name="paid",
        )
        .sink("order-payments")
    )
    return b
