"""Fixtures of the Redis broker tests: real redis-server processes (redisserver.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from redisserver import RedisServer

from tests.helpers.extras import importable, skipped_module

_databases = itertools.count()

#: Every test here needs the redis client (the `redis` extra); without it they are skipped.
#: Looked for as redis.client: without the extra, `import redis` does not fail under
#: pytest but finds this directory, a namespace package named redis (pytest puts tests/
#: on sys.path, for tests/conftest.py).
MISSING = (
    "the Redis broker needs pip install 'rstreams[redis]'"
    if not importable("redis.client")
    else None
)


def pytest_pycollect_makemodule(
    module_path: Path, parent: pytest.Collector
) -> pytest.Module | None:
    return skipped_module(module_path, parent, MISSING) if MISSING else None


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server per test process, shared: tests get their own database or prefix."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """``redis://127.0.0.1:<port>/<db>``: an empty database of the shared server (16 of them,
    flushed before each use)."""
    import redis

    db = next(_databases) % 16
    redis.Redis(port=redis_server.port, db=db).flushdb()
    return f"redis://127.0.0.1:{redis_server.port}/{db}"


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test alone (for restarts, kills and settings)."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()
