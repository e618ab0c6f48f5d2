"""The test servers themselves: real, restartable, persistent when asked."""

from __future__ import annotations

from pathlib import Path

import redis
from redisserver import RedisServer


def test_a_persistent_server_keeps_acknowledged_writes_across_a_kill(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    try:
        redis.Redis.from_url(server.url).xadd("s", {"v": "1"})
        server.restart(sig=9)
        assert redis.Redis.from_url(server.url).xlen("s") == 1
    finally:
        server.stop()


def test_a_server_without_persistence_comes_back_empty(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, persist=False).start()
    try:
        redis.Redis.from_url(server.url).xadd("s", {"v": "1"})
        server.restart(sig=9)
        assert redis.Redis.from_url(server.url).xlen("s") == 0
    finally:
        server.stop()
