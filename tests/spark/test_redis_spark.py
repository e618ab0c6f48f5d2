"""Redis streams written by a plain client, read (and written) by Spark through the
``rstreams-redis`` Python data source: the same tables as the embedded runtime."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

redis = pytest.importorskip("redis")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "redis"))
from redisserver import RedisServer  # noqa: E402

from rstreams import RedisStream, StreamBuilder  # noqa: E402
from rstreams.loader import load_topology  # noqa: E402
from rstreams.runtime.engine.supervisor import Supervisor  # noqa: E402
from rstreams.runtime.spark import run_spark  # noqa: E402

pytestmark = pytest.mark.slow

PIPELINE = """
from rstreams import RedisStream, StreamBuilder

def build():
    b = StreamBuilder("shop")
    orders = b.source(RedisStream("orders", key="id", value="amount"), "json")
    orders.groupByKey().sum().sink(RedisStream("totals", key="id", value="total"))
    return b
"""

ORDERS = [(7, 12.5), (8, 1), (7, 0.5), (9, 3), (8, 2)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    s = RedisServer(tmp_path_factory.mktemp("redis"))
    s.start()
    yield s
    s.stop()


def xadd(r: Any, rows: list[tuple[int, float]]) -> None:
    for i, amount in rows:
        r.xadd("orders", {"id": i, "amount": amount})


def last_totals(r: Any) -> dict[str, float]:
    return {f[b"id"].decode(): float(f[b"total"]) for _, f in r.xrange("totals")}


def test_a_sum_per_id_of_a_redis_stream_is_the_same_table_on_spark_and_embedded(
    spark: Any, server: RedisServer, tmp_path: Path
) -> None:
    embedded_db, spark_db = redis.Redis(port=server.port, db=1), redis.Redis(port=server.port, db=2)
    for r in (embedded_db, spark_db):
        r.flushdb()
        xadd(r, ORDERS)
    path = tmp_path / "pipeline.py"
    path.write_text(textwrap.dedent(PIPELINE))
    topology = load_topology(str(path))

    sup = Supervisor(
        str(path), topology, {}, data_dir=tmp_path / "data", workers=1,
        broker=f"redis://127.0.0.1:{server.port}/1", worker_args=["--commit-interval", "0.2"],
    )  # fmt: skip
    try:
        sup.run()
        embedded = sup.tables()["totals"]
    finally:
        sup.close()

    result = run_spark(topology, {}, spark=spark, redis=f"redis://127.0.0.1:{server.port}/2")
    assert result.tables["totals"] == embedded == {"7": 13.0, "8": 3, "9": 3}
    assert result.records_in == len(ORDERS)
    # The sink stream: one entry per key on Spark (its final table), every update on
    # the embedded runtime; the last entry of each key agrees.
    assert last_totals(spark_db) == last_totals(embedded_db) == {"7": 13.0, "8": 3.0, "9": 3.0}
    assert spark_db.xlen("totals") == 3
    # The source is only read: nothing removed, no consumer group.
    assert spark_db.xlen("orders") == len(ORDERS) and spark_db.xinfo_groups("orders") == []


def test_a_streaming_query_reads_new_entries_after_its_checkpoint(
    spark: Any, server: RedisServer, tmp_path: Path
) -> None:
    r = redis.Redis(port=server.port, db=3)
    r.flushdb()
    xadd(r, ORDERS[:3])
    b = StreamBuilder("shop-live")
    orders = b.source(RedisStream("orders", key="id", value="amount"), "json")
    orders.groupByKey().sum().sink("totals")
    topology = b.build()
    url, checkpoint = f"redis://127.0.0.1:{server.port}/3", str(tmp_path / "checkpoint")

    def run() -> Any:
        return run_spark(
            topology, {}, spark=spark, redis=url, streaming=True, checkpoint=checkpoint
        )

    assert run().tables["totals"] == {"7": 13.0, "8": 1}
    xadd(r, ORDERS[3:])
    assert run().tables["totals"] == {"7": 13.0, "8": 3, "9": 3}
