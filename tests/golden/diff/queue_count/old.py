"""Amount per customer over 8 queues."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("totals")
    (
        b.source("orders", "json")
        .keyBy(lambda o: o["customer"])
        .sum(lambda o: o["amount"], name="total", queues=8)
        .sink("totals")
    )
    return b
