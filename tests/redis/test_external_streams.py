"""Redis streams other programs own, as sources and sinks of a durable run (RedisStream):
written and read back with a plain redis client, copied exactly once, never changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from rstreams import RedisStream, StreamBuilder
from rstreams.errors import ConfigError, TopologyError
from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from tests.helpers.redisstreams import PIPELINE, orders, run, totals, write

#: A job topic (refunds, from a file) and an external stream (all fields) in one pipeline.
MIXED = """
from rstreams import RedisStream, StreamBuilder

def build():
    b = StreamBuilder("mixed")
    orders = b.source("incoming", external=RedisStream("app:orders"))
    refunds = b.source("refunds", "json")
    (orders.merge(refunds)
        .keyBy(lambda o: o["id"])
        .sum(lambda o: float(o["amount"]))
        .sink("net"))
    return b
"""


@pytest.mark.slow
def test_a_stream_written_by_a_plain_client_is_summed_into_a_stream_read_by_one(
    tmp_path: Path, redis_url: str
) -> None:
    r = redis.Redis.from_url(redis_url)
    orders(r, (7, 12.5), (8, 1), (7, 0.5))
    path = write(tmp_path, PIPELINE)
    status, tables = run(tmp_path, path, redis_url)
    assert status["records_in"] == 3
    assert tables["totals"] == {"7": 13.0, "8": 1}
    got, _ = totals(r)
    assert got == {"7": 13.0, "8": 1.0}
    # The source stream is only read: no entry removed, no consumer group left behind.
    assert r.xlen("orders") == 3
    assert r.xinfo_groups("orders") == []

    # Run again: nothing is copied twice, in or out; new entries are.
    _, before = totals(r)
    status, tables = run(tmp_path, path, redis_url)
    assert status["records_in"] == 0
    assert totals(r)[1] == before
    orders(r, (8, 2))
    status, tables = run(tmp_path, path, redis_url)
    assert status["records_in"] == 1
    got, count = totals(r)
    assert got == {"7": 13.0, "8": 3.0} and count == before + 1
    assert r.xlen("orders") == 4 and r.xinfo_groups("orders") == []


@pytest.mark.slow
def test_a_job_topic_and_an_external_stream_in_one_pipeline(tmp_path: Path, redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    for i, amount in [(1, "10"), (2, "4"), (1, "5")]:
        r.xadd("app:orders", {"id": i, "amount": amount})
    refunds = tmp_path / "refunds.jsonl"
    refunds.write_text('{"id": "1", "amount": -3}\n')
    path = write(tmp_path, MIXED)
    status, tables = run(tmp_path, path, redis_url, {"refunds": str(refunds)})
    assert status["records_in"] == 4
    assert tables["net"] == {"1": 12.0, "2": 4.0}
    assert r.xlen("app:orders") == 3


@pytest.mark.slow
def test_entries_trimmed_before_the_job_copied_them_stop_the_run(
    tmp_path: Path, redis_url: str
) -> None:
    r = redis.Redis.from_url(redis_url)
    orders(r, (1, 1))
    path = write(tmp_path, PIPELINE)
    run(tmp_path, path, redis_url)
    copied = r.xrange("orders")[-1][0].decode()
    orders(r, (2, 1), (3, 1))
    r.xtrim("orders", maxlen=1, approximate=False)  # the entry of id 2 was never copied
    with pytest.raises(ConfigError) as e:
        run(tmp_path, path, redis_url)
    msg = str(e.value)
    assert "'orders'" in msg and copied in msg and "lost" in msg and "--fresh" in msg


def test_a_stream_deleted_under_the_job_is_reported(tmp_path: Path, redis_url: str) -> None:
    from rstreams.runtime.engine.io.external import ExternalIngest, StreamPosition
    from rstreams.runtime.queues.memory import MemoryBroker

    r = redis.Redis.from_url(redis_url)
    orders(r, (1, 1))
    b = StreamBuilder("j")
    b.source(RedisStream("orders", value="amount")).sink("out")
    topology = b.build()
    broker = MemoryBroker()
    broker.create_topic("orders", 2)
    ingest = ExternalIngest(r, broker, topology, {"orders": 2}, chunk=10, follow=True)
    assert ingest.step() and ingest.copied() == 1
    first = r.xrange("orders")[0][0].decode()
    assert ingest.sources[0].position == StreamPosition("orders", first, 1)
    r.delete("orders")
    with pytest.raises(ConfigError, match="no longer exists"):
        ingest.step()
    r.xadd("orders", {"amount": 1})  # created again: its count starts over
    with pytest.raises(ConfigError, match="deleted and created again"):
        ingest.step()


def test_external_streams_need_a_redis_broker(tmp_path: Path) -> None:
    import rstreams

    path = write(tmp_path, PIPELINE)
    with pytest.raises(ConfigError, match=r"--broker redis://"):
        Supervisor(path, load_topology(path), {}, data_dir=tmp_path / "data", workers=1)
    with pytest.raises(ConfigError, match=r"--broker redis://"):
        rstreams.run(load_topology(path), {})
    with pytest.raises(ConfigError, match="bind no input file"):
        rstreams.run(load_topology(path), {"orders": path})


def test_the_spec_is_checked_where_it_is_written() -> None:
    with pytest.raises(TopologyError, match="timestamp"):
        RedisStream("s", timestamp="ts")
    with pytest.raises(TopologyError, match="external=RedisStream"):
        StreamBuilder("j").source(RedisStream("app:orders"))
    b = StreamBuilder("j")
    b.source("o", external=RedisStream("app:orders", timestamp="field:ts")).sink(
        RedisStream("out", value="v")
    )
    t = b.build()
    assert t.external_sources["o"].timestamp_field == "ts"
    assert t.external_sinks == {"out": RedisStream("out", value="v")}
    assert "(topic: o, Redis stream: app:orders)" in t.describe()
    assert "(topic: out, Redis stream: out)" in t.describe()


@pytest.mark.slow
def test_a_followed_stream_is_tailed_while_a_plain_client_writes(
    tmp_path: Path, redis_url: str
) -> None:
    import threading
    import time

    r = redis.Redis.from_url(redis_url)
    path = write(tmp_path, PIPELINE)
    sup = Supervisor(
        path, load_topology(path), {}, data_dir=tmp_path / "data", workers=1, follow=True,
        broker=redis_url, worker_args=["--commit-interval", "0.2"],
    )  # fmt: skip
    done: list[dict[str, Any]] = []
    thread = threading.Thread(target=lambda: done.append(sup.run()))
    thread.start()  # (no stream yet: a followed run waits for it)
    try:
        expected: dict[str, float] = {}
        for n in range(60):
            i, amount = n % 7, n + 0.5
            r.xadd("orders", {"id": i, "amount": amount})
            expected[str(i)] = expected.get(str(i), 0) + amount
            if n % 20 == 0:
                time.sleep(0.3)
        deadline = time.monotonic() + 60
        while totals(r)[0] != expected and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        sup.stop_signal = "SIGTERM"  # (how a signal stops a run: the loop raises)
        thread.join(60)
        sup.close()
    assert done and done[0]["records_in"] == 60
    assert totals(r)[0] == expected
    assert r.xlen("orders") == 60 and r.xinfo_groups("orders") == []


@pytest.mark.slow
def test_rstreams_run_reads_and_writes_redis_streams(tmp_path: Path, redis_url: str) -> None:
    import subprocess
    import sys

    r = redis.Redis.from_url(redis_url)
    orders(r, (7, 12.5), (8, 1), (7, 0.5))
    path = write(tmp_path, PIPELINE)
    cmd = [sys.executable, "-m", "rstreams", "run", path, "--data-dir", str(tmp_path / "d")]
    # Without a Redis broker: one clear line, exit 2.
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2, bad.stderr
    assert "--broker redis://" in bad.stderr and "'orders'" in bad.stderr
    ok = subprocess.run(
        [*cmd, "--broker", redis_url, "--workers", "2"], capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert totals(r)[0] == {"7": 13.0, "8": 1.0}
    assert r.xlen("orders") == 3 and r.xinfo_groups("orders") == []


def _copy_setup(r: redis.Redis, follow: bool) -> tuple[Any, Any]:
    from rstreams.runtime.engine.io.external import ExternalIngest
    from rstreams.runtime.queues.memory import MemoryBroker

    b = StreamBuilder("j")
    b.source(RedisStream("orders", value="amount")).sink("out")
    broker = MemoryBroker()
    broker.create_topic("orders", 2)
    ingest = ExternalIngest(r, broker, b.build(), {"orders": 2}, chunk=10, follow=follow)
    return ingest, broker


def test_a_bounded_copy_ends_when_the_last_entries_were_deleted(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    orders(r, (1, 1), (2, 2), (3, 3))
    r.xdel("orders", r.xrange("orders")[-1][0])  # the stream's last id is no entry now
    ingest, broker = _copy_setup(r, follow=False)
    while not ingest.done:
        assert ingest.step() or ingest.done
    assert ingest.copied() == 2
    values = [rec.value for q in range(2) for rec in broker.read("orders", q, 0, 10)]
    assert sorted(values) == [b"1", b"2"]


def test_two_egresses_of_one_sink_never_add_an_entry_twice(redis_url: str) -> None:
    from rstreams.runtime.engine.io.external import Egress
    from rstreams.runtime.queues.memory import MemoryBroker

    r = redis.Redis.from_url(redis_url)
    b = StreamBuilder("j")
    b.source("in").sink(RedisStream("out", value="v"))
    topology = b.build()
    others: list[Egress] = []

    class Racing(MemoryBroker):
        """The other egress copies while this one is between its WATCH and its EXEC."""

        def read(self, *args: Any, **kwargs: Any) -> Any:
            if others:
                others.pop().step()
            return super().read(*args, **kwargs)

    broker = Racing()
    broker.create_topic("out", 1)
    broker.append("out", 0, [(0, None, f'"{i}"'.encode(), ()) for i in range(25)])
    first = Egress(r, broker, topology, {"out": 1}, chunk=10)
    second = Egress(r, broker, topology, {"out": 1}, chunk=10)
    others.append(second)
    while not first.drained():
        first.step()
        second.step()
    assert [f[b"v"] for _, f in r.xrange("out")] == [str(i).encode() for i in range(25)]
    assert first.written + second.written == 25


KILLED_RUN = """
import sys
from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from tests.helpers.redisstreams import PIPELINE, orders, run, totals, write

path, data, url = sys.argv[1:4]
sup = Supervisor(path, load_topology(path), {}, data_dir=data, workers=2, broker=url,
                 chunk_lines=200, worker_args=["--commit-interval", "0.2"])
try:
    sup.run()
finally:
    sup.close()
"""


@pytest.mark.slow
def test_a_supervisor_killed_mid_copy_then_run_again_copies_each_entry_once(
    tmp_path: Path, redis_url: str
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from rstreams.runtime.queues.redisstreams import RedisBroker, RedisTarget

    r = redis.Redis.from_url(redis_url)
    n = 20_000
    pipe = r.pipeline(transaction=False)
    expected: dict[str, float] = {}
    for i in range(n):
        pipe.xadd("orders", {"id": i % 13, "amount": i % 10})
        expected[str(i % 13)] = expected.get(str(i % 13), 0) + i % 10
    pipe.execute()
    path = write(tmp_path, PIPELINE)
    script = tmp_path / "run.py"
    script.write_text(KILLED_RUN)
    p = subprocess.Popen(
        [sys.executable, str(script), path, str(tmp_path / "data"), redis_url],
        stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    copied = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            copied = sum(  # (the end offset of each queue: its last entry id's sequence)
                int(r.xinfo_stream(k)["last-generated-id"].split(b"-")[1])
                for k in r.scan_iter("rs:{shop}:q:orders:*")
            )
            if copied >= 2_000:
                break
            time.sleep(0.01)
        p.send_signal(signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
    assert 0 < copied < n, "the run was not killed mid-copy"
    # Its workers leave when their supervisor is gone; its lock would lapse in seconds.
    deadline = time.monotonic() + 60
    while list(r.scan_iter("rs:{shop}:*member:*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    r.delete("rs:{shop}:lock")
    _, tables = run(tmp_path, path, redis_url)
    assert tables["totals"] == expected
    assert totals(r)[0] == expected
    broker = RedisBroker.open(RedisTarget.parse(redis_url), "shop")
    try:
        source = sum(
            broker.end_offset("orders", q) for q in range(broker.queue_count("orders") or 0)
        )
        sink = sum(broker.end_offset("totals", q) for q in range(broker.queue_count("totals") or 0))
    finally:
        broker.close()
    assert source == n  # each entry copied into the job once
    assert totals(r)[1] == sink  # each sink record added to the stream once
    assert r.xlen("orders") == n and r.xinfo_groups("orders") == []


#: Whole entries (dict mode): a count per "word" field.
WHOLE = """
from rstreams import RedisStream, StreamBuilder

def build():
    b = StreamBuilder("words")
    b.source(RedisStream("said")).keyBy(lambda e: e["word"]).count().sink("counts")
    return b
"""


@pytest.mark.slow
@pytest.mark.parametrize("on_error", ["fail", "skip", "dead-letter"])
def test_an_entry_that_is_not_utf8_is_never_read_with_replacement_characters(
    tmp_path: Path, redis_url: str, on_error: str
) -> None:
    """Before: junk bytes were decoded with U+FFFD and counted as keys, silently. Now
    the source step applies on_error to the entry, naming the stream and the entry id:
    fail stops the run (exit 1), skip and dead-letter leave it out of an exact table."""
    import json
    import subprocess
    import sys

    r = redis.Redis.from_url(redis_url)
    for word in ("a", "b", "a"):
        r.xadd("said", {"word": word})
    bad = r.xadd("said", {"word": b"\xff\xfe junk"}).decode()
    r.xadd("said", {b"w\xc3": b"x"})  # (a field name cut in the middle of a character)
    path = write(tmp_path, WHOLE)
    out = tmp_path / "counts.jsonl"
    p = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", path, "--broker", redis_url, "--workers", "1",
         "--data-dir", str(tmp_path / "d"), "--output", str(out), "--on-error", on_error],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if on_error == "fail":
        assert p.returncode == 1, p.stderr
        assert f"entry {bad} of the Redis stream 'said'" in p.stderr, p.stderr
        assert "field 'word' is not UTF-8" in p.stderr and "Traceback" not in p.stderr
        assert not out.exists()
        return
    assert p.returncode == 0, p.stderr
    table = {row["key"]: row["value"] for row in map(json.loads, out.read_text().splitlines())}
    assert table == {"a": 2, "b": 1}  # no junk key, no replacement character
    assert "2 record(s) failed and were" in p.stderr, p.stderr
    logs = "".join(f.read_text() for f in (tmp_path / "d" / "words" / "logs").glob("*"))
    assert f"entry {bad} of the Redis stream 'said'" in logs, logs[-3000:]
    if on_error == "dead-letter":
        c = subprocess.run(
            [sys.executable, "-m", "rstreams", "consume", "words-dead-letter", "--broker",
             redis_url, "--job", "words", "--from-beginning", "--max", "10"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert c.returncode == 0, c.stderr
        letters = [json.loads(line) for line in c.stdout.splitlines()]
        assert [d["error"].split(":")[0] for d in letters] == ["BadEntryError"] * 2
        assert f"entry {bad} " in letters[0]["error"]
        assert json.loads(letters[0]["value"]) == {"word": "\\xff\\xfe junk"}  # (the bytes)
