"""A pipeline over Redis streams other programs own, and what writes and reads them with a
plain client: shared by tests/redis/test_external_streams.py and the Spark backend's
tests/spark/test_redis_spark.py."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import redis

from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.supervisor import Supervisor

#: The sum per ``id`` of the stream ``orders`` into the stream ``totals``.
PIPELINE = """
from rstreams import RedisStream, StreamBuilder

def build():
    b = StreamBuilder("shop")
    orders = b.source(RedisStream("orders", key="id", value="amount"), "json")
    orders.groupByKey().sum().sink(RedisStream("totals", key="id", value="total"))
    return b
"""


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "pipeline.py"
    p.write_text(textwrap.dedent(text))
    return str(p)


def run(
    tmp_path: Path, path: str, url: str, inputs: dict[str, str] | None = None, **options: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    sup = Supervisor(
        path, load_topology(path), inputs or {}, data_dir=tmp_path / "data", workers=1,
        broker=url, worker_args=["--commit-interval", "0.2"], **options,
    )  # fmt: skip
    try:
        status = sup.run()
        return status, sup.tables()
    finally:
        sup.close()


def totals(r: redis.Redis) -> tuple[dict[str, float], int]:
    """The last total per id of the stream ``totals``, and its entry count."""
    entries = r.xrange("totals")
    last = {f[b"id"].decode(): float(f[b"total"]) for _, f in entries}
    return last, len(entries)


def orders(r: redis.Redis, *rows: tuple[int, float]) -> None:
    for i, amount in rows:
        r.xadd("orders", {"id": i, "amount": amount})
