"""What a process of the job notices on its own: a queue that ends below where it saw it
end (the server came back without its data, or the stream was deleted and created
again), and a server that is not up yet when it connects with patience."""

from __future__ import annotations

import threading

import pytest
import redis
from redisserver import RedisServer, free_port

from rstreams.runtime.queues.redisstreams import (
    RedisAuthError,
    RedisBroker,
    RedisDataLostError,
    RedisTarget,
    RedisUnreachableError,
    connect,
)


def _rows(n: int) -> list[tuple[int, None, bytes, tuple]]:
    return [(1, None, b"x", ())] * n


def test_a_queue_that_went_back_is_lost_data(redis_url: str) -> None:
    target = RedisTarget.parse(redis_url)
    seen = RedisBroker(connect(target), "job")
    seen.create_topic("t", 2)
    seen.append("t", 0, _rows(10))
    seen.append("t", 1, _rows(3))
    seen.commit("g", "t", 1, 3)
    assert seen.end_offset("t", 0) == 10 and seen.committed("g", "t", 1) == 3
    seen.check_reached()  # (nothing went back)
    # Everything of the job deleted, the topic created again (as a fresh worker would).
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys("rs:{job}:*"))
    again = RedisBroker(connect(target), "job")
    again.create_topic("t", 2)
    again.append("t", 0, _rows(4))
    with pytest.raises(RedisDataLostError) as e:
        seen.end_offset("t", 0)
    assert e.value.segment == "rs:{job}:q:t:0" and e.value.offset == 4
    assert "ends at offset 4 but the job had reached offset 10" in str(e.value)
    assert "--fresh" in str(e.value) and "docs/redis.md" in str(e.value)
    with pytest.raises(RedisDataLostError, match=r"ends at offset 0 but .* reached offset 3"):
        seen.end_offset("t", 1)  # (its committed offset counts as reached)
    with pytest.raises(RedisDataLostError):
        seen.check_reached()  # what the supervisor runs once Redis answers again
    seen.close()
    again.close()


def test_a_deleted_stream_names_the_position_reached(redis_url: str) -> None:
    broker = RedisBroker(connect(RedisTarget.parse(redis_url)), "job")
    broker.create_topic("t", 1)
    broker.append("t", 0, _rows(7))
    assert broker.end_offset("t", 0) == 7
    redis.Redis.from_url(redis_url).delete("rs:{job}:q:t:0")
    with pytest.raises(RedisDataLostError, match=r"does not exist .* reached offset 7"):
        broker.append("t", 0, _rows(1))
    with pytest.raises(RedisDataLostError, match="reached offset 7"):
        broker.read("t", 0, 7)
    broker.close()


def test_connect_waits_for_a_server_that_starts_but_not_on_a_wrong_password(tmp_path) -> None:
    server = RedisServer(tmp_path / "redis", port=free_port(), password="pw")
    target = RedisTarget.parse(f"redis://:pw@127.0.0.1:{server.port}/0")
    with pytest.raises(RedisUnreachableError):
        connect(target)  # (no patience: at once)
    starter = threading.Thread(target=server.start)
    starter.start()
    try:
        client = connect(target, patience=300)  # tries again until the server answers
        assert client.ping()
        client.close()
        wrong = RedisTarget.parse(f"redis://:nope@127.0.0.1:{server.port}/0")
        with pytest.raises(RedisAuthError):
            connect(wrong, patience=300)  # refused: never tried again
    finally:
        starter.join()
        server.stop()
