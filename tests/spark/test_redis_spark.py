"""Redis streams written by a plain client, read (and written) by Spark through the
``rstreams-redis`` Python data source: the same tables as the embedded runtime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# (redis.client, not redis: see tests/redis/conftest.py)
pytest.importorskip("redis.client", reason="needs pip install 'rstreams[redis]'")

import redis

from rstreams import RedisStream, StreamBuilder
from rstreams.cli import main
from rstreams.loader import load_topology
from rstreams.runtime.queues.redisstreams.target import RedisTarget
from rstreams.runtime.spark import run_spark
from tests.helpers.redisserver import RedisServer
from tests.helpers.redisstreams import PIPELINE, orders, run, totals, write

pytestmark = pytest.mark.slow

ORDERS = [(7, 12.5), (8, 1), (7, 0.5), (9, 3), (8, 2)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    s = RedisServer(tmp_path_factory.mktemp("redis"))
    s.start()
    yield s
    s.stop()


def test_a_sum_per_id_of_a_redis_stream_is_the_same_table_on_spark_and_embedded(
    spark: Any, server: RedisServer, tmp_path: Path
) -> None:
    embedded_db, spark_db = redis.Redis(port=server.port, db=1), redis.Redis(port=server.port, db=2)
    for r in (embedded_db, spark_db):
        r.flushdb()
        orders(r, *ORDERS)
    path = write(tmp_path, PIPELINE)
    _, tables = run(tmp_path, path, f"redis://127.0.0.1:{server.port}/1")
    embedded = tables["totals"]

    topology = load_topology(path)
    result = run_spark(topology, {}, spark=spark, redis=f"redis://127.0.0.1:{server.port}/2")
    assert result.tables["totals"] == embedded == {"7": 13.0, "8": 3, "9": 3}
    assert result.records_in == len(ORDERS)
    # The sink stream: one entry per key on Spark (its final table), every update on
    # the embedded runtime; the last entry of each key agrees.
    on_spark, count = totals(spark_db)
    assert on_spark == totals(embedded_db)[0] == {"7": 13.0, "8": 3.0, "9": 3.0}
    assert count == 3
    # The source is only read: nothing removed, no consumer group.
    assert spark_db.xlen("orders") == len(ORDERS) and spark_db.xinfo_groups("orders") == []


def test_a_streaming_query_reads_new_entries_after_its_checkpoint(
    spark: Any, server: RedisServer, tmp_path: Path
) -> None:
    r = redis.Redis(port=server.port, db=3)
    r.flushdb()
    orders(r, *ORDERS[:3])
    b = StreamBuilder("shop-live")
    source = b.source(RedisStream("orders", key="id", value="amount"), "json")
    source.groupByKey().sum().sink("totals")
    topology = b.build()
    url, checkpoint = f"redis://127.0.0.1:{server.port}/3", str(tmp_path / "checkpoint")

    def run_once() -> Any:
        return run_spark(
            topology, {}, spark=spark, redis=url, streaming=True, checkpoint=checkpoint
        )

    assert run_once().tables["totals"] == {"7": 13.0, "8": 1}
    orders(r, *ORDERS[3:])
    assert run_once().tables["totals"] == {"7": 13.0, "8": 3, "9": 3}


def test_a_missing_stream_and_a_password_in_the_url_are_refused(
    spark: Any, server: RedisServer, tmp_path: Path
) -> None:
    from rstreams.errors import ConfigError
    from rstreams.runtime.spark.redisstreams import spark_target

    redis.Redis(port=server.port, db=4).flushdb()
    topology = load_topology(write(tmp_path, PIPELINE))
    with pytest.raises(ConfigError, match=r"'orders' .* does not exist"):
        run_spark(topology, {}, spark=spark, redis=f"redis://127.0.0.1:{server.port}/4")
    # The CLI: --broker with --backend spark names the streams' server.
    r = redis.Redis(port=server.port, db=4)
    orders(r, *ORDERS)
    path = write(tmp_path, PIPELINE)
    url = f"redis://127.0.0.1:{server.port}/4"
    assert main(["run", path, "--backend", "spark", "--broker", url, "-q"]) == 0
    assert totals(r) == ({"7": 13.0, "8": 3.0, "9": 3.0}, 3)
    # Spark shows a data source's options: a password goes in a file, never in them.
    with pytest.raises(ConfigError, match="password file") as e:
        spark_target("redis://app:s3cret@127.0.0.1:6379/0")
    assert "s3cret" not in str(e.value)
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    target = spark_target(RedisTarget.parse("redis://app@127.0.0.1:6379/0", str(secret)))
    assert "s3cret" not in target.to_json()


def test_an_entry_that_is_not_utf8_stops_the_run_naming_stream_and_entry(
    spark: Any, server: RedisServer, tmp_path: Path
) -> None:
    """Before: junk bytes became replacement characters, and extra keys, silently."""
    from rstreams.errors import RStreamsError

    r = redis.Redis(port=server.port, db=5)
    r.flushdb()
    orders(r, (7, 1))
    bad = r.xadd("orders", {"id": b"\xff\xfe", "amount": 2}).decode()
    topology = load_topology(write(tmp_path, PIPELINE))
    with pytest.raises(RStreamsError) as e:
        run_spark(topology, {}, spark=spark, redis=f"redis://127.0.0.1:{server.port}/5")
    assert f"entry {bad} of the Redis stream 'orders': the key field 'id' is not UTF-8" in str(
        e.value
    )
