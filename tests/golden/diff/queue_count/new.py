"""The same sum over 4 queues: keys hash to other queues than their state is on."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("totals")
    (
        b.source("orders", "json")
        .keyBy(lambda o: o["customer"])
        .sum(lambda o: o["amount"], name="total", queues=4)
        .sink("totals")
    )
    return b
