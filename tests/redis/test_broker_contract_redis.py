"""The Broker contract (tests/unit/test_broker_contract.py) on RedisBroker, unchanged.

It runs twice: with entries of the default size, and of 3 records, so that reads start
and end inside entries and cross many, and purges and compaction cut through them.

The unit directory stays free of servers: this module loads the contract's tests and
runs them with a ``broker`` fixture that is a RedisBroker on a real redis-server.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from rstreams.runtime.queues.redisstreams import RedisBroker, RedisTarget

_path = Path(__file__).resolve().parents[1] / "unit" / "test_broker_contract.py"
_spec = importlib.util.spec_from_file_location("broker_contract_on_redis", _path)
assert _spec is not None and _spec.loader is not None
_contract = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_contract)

# Every test of the contract, and its fixture "t" (which asks for "broker": ours).
globals().update(
    {name: getattr(_contract, name) for name in dir(_contract) if name.startswith("test_")}
)
t = _contract.t


@pytest.fixture(params=[RedisBroker.entry_records, 3], ids=["entries", "small-entries"])
def broker(redis_url: str, request: pytest.FixtureRequest) -> Iterator[RedisBroker]:
    b = RedisBroker.open(RedisTarget.parse(redis_url), f"contract{request.param}")
    b.entry_records = request.param
    yield b
    b.close()
