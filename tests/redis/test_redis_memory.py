"""redis-server holds a bounded part of a job's input: the ingest waits for the workers
(AHEAD_CHUNKS per source queue), consumed source and shuffle records are trimmed after
every commit, and changelogs are compacted (docs/redis.md, "Memory")."""

from __future__ import annotations

from pathlib import Path

import redis
from redisserver import RedisServer
from test_run_redis import WORDCOUNT, big_corpus, expected_counts

from rstreams.loader import load_topology
from rstreams.runtime.engine.ingest import AHEAD_CHUNKS
from rstreams.runtime.engine.supervisor import Supervisor

CHUNK = 500


def test_redis_holds_a_bounded_part_of_the_input(tmp_path: Path, own_redis: RedisServer):
    corpus = big_corpus(tmp_path, 20)  # 124k lines, many times the bound
    client = redis.Redis(port=own_redis.port)
    topology = load_topology(str(WORDCOUNT))
    roles = {name: t.role for name, t in topology.topics.items()}
    held: dict[str, int] = {}  # the most records seen at once in each role's streams

    def sample(_: object) -> None:
        now: dict[str, int] = {}
        for key in client.scan_iter(match=b"rs:{wordcount}:q:*", count=1000):
            topic = key.decode().split(":")[3]
            role = roles.get(topic, "changelog" if topic.endswith("-changelog") else "?")
            now[role] = now.get(role, 0) + int(client.xlen(key))
        for role, n in now.items():
            held[role] = max(held.get(role, 0), n)

    sup = Supervisor(
        str(WORDCOUNT), topology, {"sentences": str(corpus)},
        data_dir=tmp_path / "data", workers=1, chunk_lines=CHUNK, progress=sample,
        broker=own_redis.url,
        worker_args=["--commit-interval", "0.2", "--maintenance-interval", "0.2"],
    )  # fmt: skip
    try:
        sup.run()
        table = sup.tables()["word-counts"]
        queues = sup.queue_counts["sentences"]
    finally:
        sup.close()
    assert table == expected_counts(corpus)
    lines = sum(1 for _ in corpus.open("rb"))
    bound = queues * (2 * (AHEAD_CHUNKS + 1) * CHUNK + 1)
    print(f"held at most: {held}; input {lines} lines, source bound {bound}")
    assert held["source"] <= bound < lines // 4
