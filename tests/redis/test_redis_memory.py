"""redis-server holds a bounded part of a job's input: the ingest trims a source queue
that holds AHEAD_CHUNKS chunks and waits for the workers, consumed shuffle records are
trimmed after every commit, and changelogs are compacted (docs/redis.md, "Memory")."""

from __future__ import annotations

from pathlib import Path

import redis
from redisserver import RedisServer
from test_run_redis import WORDCOUNT, big_corpus, expected_counts

from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from rstreams.runtime.engine.io.ingest import AHEAD_CHUNKS
from rstreams.runtime.queues.redisstreams import RedisBroker

CHUNK = 300


def test_redis_holds_a_bounded_part_of_the_input(tmp_path: Path, own_redis: RedisServer):
    corpus = big_corpus(tmp_path, 20)  # 124k lines, many times the bound
    client = redis.Redis(port=own_redis.port)
    broker = RedisBroker(redis.Redis(port=own_redis.port), "wordcount")
    topology = load_topology(str(WORDCOUNT))
    roles = {name: t.role for name, t in topology.topics.items()}
    held: dict[str, int] = {}  # the most records seen at once in each role's streams

    def sample(_: object) -> None:
        now: dict[str, int] = {}
        for key in client.scan_iter(match=b"rs:{wordcount}:q:*", count=1000):
            topic, queue = key.decode().split(":")[3:5]
            role = roles.get(topic, "changelog" if topic.endswith("-changelog") else "?")
            now[role] = now.get(role, 0) + broker.records_held(topic, int(queue))
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
        broker.close()
    assert table == expected_counts(corpus)
    lines = sum(1 for _ in corpus.open("rb"))
    bound = queues * (AHEAD_CHUNKS + 1) * CHUNK
    print(f"held at most: {held}; input {lines} lines, source bound {bound}")
    assert held["source"] <= bound < lines // 8
    words = sum(expected_counts(corpus).values())
    assert held["shuffle"] < words // 10  # (trimmed after each commit: not every word)
    # Per changelog queue, at most 2 x its keys + compact_min_records (10,000) before a
    # compaction after a commit, plus one commit's writes (at most its keys again).
    assert held["changelog"] <= 3 * len(table) + queues * 10_000


def test_compaction_frees_memory_and_keeps_the_latest_record_of_each_key(own_redis):
    """XDEL alone frees no memory when the records kept are spread over the stream:
    compaction rewrites the queue, with the same offsets and end."""
    client = redis.Redis(port=own_redis.port)
    broker = RedisBroker(redis.Redis(port=own_redis.port), "job")
    broker.create_topic("log", 1, compacted=True)
    broker.append("log", 0, [(0, None, b"no key", ())])
    base = client.info("memory")["used_memory"]
    latest = {}
    for n in range(20):  # a key of its own every 25 records (spread out), and hot keys
        rows = [
            (n, b"u%d-%d" % (n, i) if i % 25 == 0 else b"h%d" % (i % 50), b"v%d-%d" % (n, i), ())
            for i in range(2500)
        ]
        first = broker.append("log", 0, rows)
        latest.update({k: (first + i, v) for i, (_, k, v, _) in enumerate(rows)})
    full = client.info("memory")["used_memory"] - base
    end = broker.end_offset("log", 0)
    assert broker.compact("log", 0) == 50_000 - len(latest)
    after = client.info("memory")["used_memory"] - base
    records = broker.read("log", 0, 0)
    assert records[0].value == b"no key" and records[0].offset == 0
    assert {r.key: (r.offset, r.value) for r in records[1:]} == latest
    assert broker.end_offset("log", 0) == end and broker.start_offset("log", 0) == 0
    assert broker.records_held("log", 0) == 1 + len(latest)
    assert broker.compact("log", 0) == 0
    print(f"changelog of 50,000 records over {len(latest)} keys: {full} bytes, {after} compacted")
    assert after < full // 5  # (XDEL of the same records frees nothing here)
    broker.append("log", 0, [(0, b"k1", b"new", ())])  # appends go on after the rewrite
    assert broker.read("log", 0, end)[0].offset == end
    broker.close()
