"""What RedisBroker alone does, on real redis-server processes: records batched in
stream entries, dense offsets through compaction, XDEL and trims, atomic fenced
transactions, restarts with and without persistence, and secrets that never show. The
Broker contract itself is test_broker_contract_redis.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import redis
from redisserver import RedisServer, free_port

from rstreams.errors import ConfigError, FencedError
from rstreams.runtime.queues.base import LogRecord
from rstreams.runtime.queues.redisstreams import (
    RedisAuthError,
    RedisBroker,
    RedisDatabaseError,
    RedisDataLostError,
    RedisTarget,
    RedisTLSError,
    RedisUnreachableError,
    connect,
)
from rstreams.runtime.queues.redisstreams.target import RedisConfigError

SECRET = "s3cr3t-Pa55word"


@pytest.fixture
def broker(redis_url: str) -> Iterator[RedisBroker]:
    b = RedisBroker.open(RedisTarget.parse(redis_url), "job1")
    yield b
    b.close()


def values(records: list[LogRecord]) -> list[bytes | None]:
    return [r.value for r in records]


# -- records are stream entries ---------------------------------------------------------------


def test_records_are_batched_in_stream_entries_with_dense_ids(broker: RedisBroker) -> None:
    broker.create_topic("t", 2)
    assert broker.append("t", 1, [(5, b"k", b"v", ()), (6, None, b"", (("h", b"1"),))]) == 0
    assert broker.append("t", 1, [(7, b"", None, ())]) == 2
    raw = broker.client.xrange("rs:{job1}:q:t:1")
    # an entry's id is its last record's offset + 1, its fields n (records) and b
    assert [(i, sorted(f), f[b"n"]) for i, f in raw] == [
        (b"0-2", [b"b", b"n"], b"2"),
        (b"0-3", [b"b", b"n"], b"1"),
    ]
    unpacker = msgpack.Unpacker(raw=True)  # b: keys, offsets, timestamps, values, headers
    unpacker.feed(raw[0][1][b"b"])
    keys, offsets, ts, values, headers = unpacker
    assert (keys, values) == ([b"k", False], [b"v", b""])  # False: None
    assert array("q", ts).tolist() == [5, 6] and offsets is False
    assert headers[0] is False and msgpack.unpackb(headers[1]) == [["h", b"1"]]
    got = broker.read("t", 1, 0)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (0, 5, b"k", b"v", ()),
        (1, 6, None, b"", (("h", b"1"),)),  # None and b"" stay apart
        (2, 7, b"", None, ()),
    ]
    assert [r.offset for r in broker.read("t", 1, 1)] == [1, 2]  # from inside an entry
    assert [r.offset for r in broker.read("t", 1, 0, 1)] == [0]
    assert json.loads(broker.client.hget("rs:{job1}:topics", "t"))["queues"] == 2
    # every key of the job under one hash tag
    assert {k.decode() for k in broker.client.keys("*")} == {
        "rs:{job1}:topics",
        "rs:{job1}:ends",
        "rs:{job1}:q:t:0",
        "rs:{job1}:q:t:1",
    }
    assert broker.client.hgetall("rs:{job1}:ends") == {b"t:1": b"3"}


def test_the_end_offset_without_the_ends_hash_is_the_last_entry_id(broker: RedisBroker) -> None:
    """A queue's end is kept in a hash (XINFO STREAM would send the first and last
    entries along); without it (a job written before it) the stream's last id says."""
    broker.create_topic("t", 1)
    assert broker.end_offsets([("t", 0)]) == [0]  # (created, never written)
    broker.append("t", 0, [(i, None, b"x", ()) for i in range(7)])
    broker.client.delete("rs:{job1}:ends")
    broker.purge("t", 0, 7)  # every entry goes; the last generated id stays
    assert broker.end_offset("t", 0) == 7 and broker.records_held("t", 0) == 0
    assert broker.read("t", 0, 7) == [] and broker.append("t", 0, [(8, None, b"y", ())]) == 7
    assert broker.client.hget("rs:{job1}:ends", "t:0") == b"8"


def test_an_ends_hash_behind_its_stream_refuses_writes_whole(broker: RedisBroker) -> None:
    broker.create_topic("t", 2)
    broker.append("t", 0, [(1, None, b"a", ())])
    broker.client.hset("rs:{job1}:ends", "t:0", 0)  # (as if the hash were stale)
    refused = pytest.raises(ConfigError, match=r"rs:\{job1\}:q:t:0: an entry was not written")
    with refused, broker.transaction() as tx:
        tx.append("t", 1, [(2, None, b"b", ())])
        tx.append("t", 0, [(3, None, b"c", ())])
    assert broker.end_offsets([("t", 1)]) == [0]  # nothing of it applied


def test_a_large_append_makes_entries_of_bounded_size(broker: RedisBroker) -> None:
    broker.create_topic("t", 1)
    rows = [(i, b"k%d" % (i % 7), b"v%d" % i, ()) for i in range(1234)]
    assert broker.append("t", 0, rows) == 0
    raw = broker.client.xrange("rs:{job1}:q:t:0")
    assert [(i, f[b"n"]) for i, f in raw] == [(b"0-500", b"500"), (b"0-1000", b"500"),
                                              (b"0-1234", b"234")]  # fmt: skip
    for start, n in ((0, 5000), (499, 2), (700, 534), (1233, 10), (1234, 10)):
        got = broker.read_columns("t", 0, start, n)
        assert got.offsets == range(start, min(start + n, 1234))
        assert got.values == [v for _, _, v, _ in rows[start : start + n]]


def test_entries_rstreams_wrote_one_record_each_still_read(broker: RedisBroker) -> None:
    """Streams written by rstreams before batches (fields t, k, v, h per record) read and
    compact as ever, and appends after them are batches."""
    broker.create_topic("c", 1, compacted=True)
    key = "rs:{job1}:q:c:0"
    broker.client.xadd(key, {"t": "5", "k": "a", "v": "1"}, id="0-1")
    broker.client.xadd(key, {"t": "6", "v": "", "h": msgpack.packb([["h", b"1"]])}, id="0-2")
    broker.client.xadd(key, {"t": "7", "k": "a", "v": "2"}, id="0-3")
    assert broker.append("c", 0, [(8, b"b", b"3", ()), (9, b"a", b"4", ())]) == 3
    got = broker.read("c", 0, 0)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (0, 5, b"a", b"1", ()), (1, 6, None, b"", (("h", b"1"),)), (2, 7, b"a", b"2", ()),
        (3, 8, b"b", b"3", ()), (4, 9, b"a", b"4", ()),
    ]  # fmt: skip
    assert broker.compact("c", 0) == 2
    assert [(r.offset, r.value) for r in broker.read("c", 0, 0)] == [(1, b""), (3, b"3"), (4, b"4")]


def test_offsets_stay_dense_through_compaction_xdel_and_trims(broker: RedisBroker) -> None:
    broker.create_topic("c", 1, compacted=True)
    broker.append("c", 0, [(i, b"k%d" % (i % 2), b"%d" % i, ()) for i in range(6)])
    assert broker.records_held("c", 0) == 6
    assert broker.compact("c", 0) == 4  # the entry keeps 2 of its records, with offsets
    assert [(r.offset, r.value) for r in broker.read("c", 0, 0)] == [(4, b"4"), (5, b"5")]
    assert list(broker.read_columns("c", 0, 0).offsets) == [4, 5]
    assert [r.timestamp for r in broker.read("c", 0, 5)] == [5]
    assert broker.records_held("c", 0) == 2 and broker.compact("c", 0) == 0
    broker.client.xdel("rs:{job1}:q:c:0", "0-6")  # even the last entry: the end stays
    assert broker.end_offset("c", 0) == 6
    assert broker.append("c", 0, [(9, b"k0", b"new", ())]) == 6
    broker.purge("c", 0, 7)  # XTRIM MINID: everything; the start mark remembers
    assert broker.client.xlen("rs:{job1}:q:c:0") == 0
    assert (broker.start_offset("c", 0), broker.end_offset("c", 0)) == (7, 7)
    assert broker.append("c", 0, [(9, None, b"after", ())]) == 7
    assert broker.records_held("c", 0) == 1


def test_a_purge_inside_an_entry_keeps_it_and_moves_the_start(broker: RedisBroker) -> None:
    broker.create_topic("t", 1)
    broker.append("t", 0, [(i, None, b"%d" % i, ()) for i in range(10)])
    broker.purge("t", 0, 4)
    assert broker.client.xlen("rs:{job1}:q:t:0") == 1  # records 0-3 are in the entry still
    assert [r.offset for r in broker.read("t", 0, 4)] == list(range(4, 10))
    assert broker.records_held("t", 0) == 6
    with pytest.raises(ConfigError, match="purged"):
        broker.read("t", 0, 3)


def test_retention_drops_whole_records_from_the_start(broker: RedisBroker) -> None:
    broker.create_topic("r", 1, retention_ms=1000)
    broker.append("r", 0, [(ts, None, b"x", ()) for ts in (100, 200, 5000, 300, 6000)])
    assert broker.enforce_retention(now_ms=5800) == 2  # older than 4800, up to the first newer
    assert broker.start_offset("r", 0) == 2
    assert [r.timestamp for r in broker.read("r", 0, 2)] == [5000, 300, 6000]
    assert broker.enforce_retention(now_ms=100_000) == 2  # the last record always stays
    assert [r.offset for r in broker.read("r", 0, 4)] == [4]


def test_entries_another_program_added_are_refused(broker: RedisBroker) -> None:
    broker.create_topic("t", 1)
    broker.append("t", 0, [(1, None, b"a", ())])
    broker.client.xadd("rs:{job1}:q:t:0", {"x": "1"})  # an id from the server clock
    with pytest.raises(ConfigError, match=r"rs:\{job1\}:q:t:0: stream entry .* not written by"):
        broker.read("t", 0, 0)
    with pytest.raises(ConfigError, match="not written by rstreams"):
        broker.end_offset("t", 0)
    with pytest.raises(ConfigError, match="not written by rstreams"), broker.transaction() as tx:
        tx.commit("g", "t", 0, 1)
        tx.append("t", 0, [(2, None, b"b", ())])
    assert broker.committed("g", "t", 0) == 0 and broker.client.xlen("rs:{job1}:q:t:0") == 2
    assert broker.client.xrange("rs:{job1}:q:t:0")[0][0] == b"0-1"  # the append: not applied


def test_a_closed_broker_refuses_appends_reads_and_commits(broker: RedisBroker) -> None:
    broker.create_topic("t", 1)
    broker.close()
    for call in (
        lambda: broker.append("t", 0, [(1, None, b"a", ())]),
        lambda: broker.read("t", 0, 0),
        lambda: broker.commit("g", "t", 0, 1),
        lambda: broker.committed("g", "t", 0),
    ):
        with pytest.raises(ConfigError, match="is closed"):
            call()
    broker.flush()
    broker.close()


def test_entries_deleted_or_trimmed_under_the_job_are_detected(broker: RedisBroker) -> None:
    broker.create_topic("t", 1)
    broker.entry_records = 2  # entries 0-2, 0-4 and 0-6
    broker.append("t", 0, [(i, None, b"%d" % i, ()) for i in range(6)])
    broker.client.xdel("rs:{job1}:q:t:0", "0-4")  # offsets 2 and 3, in a topic nothing compacts
    assert values(broker.read("t", 0, 0, 2)) == [b"0", b"1"]
    with pytest.raises(RedisDataLostError, match=r"skips from offset 2 to 4"):
        broker.read("t", 0, 2)
    with pytest.raises(RedisDataLostError, match=r"skips from offset 3 to 4"):
        broker.read("t", 0, 3)
    with pytest.raises(RedisDataLostError, match=r"skips from offset 0 to 0 or later"):
        broker.read_columns("t", 0, 0)  # a gap inside the batch read
    broker.client.xtrim("rs:{job1}:q:t:0", maxlen=0)  # everything, behind the start mark
    with pytest.raises(
        RedisDataLostError, match="no entries from offset 4 on, but ends at offset 6"
    ):
        broker.read("t", 0, 4)
    assert broker.read("t", 0, 6) == [] and broker.read("t", 0, 0, max_records=0) == []


# -- transactions -----------------------------------------------------------------------------


def test_a_transaction_applies_appends_and_commits_together(broker: RedisBroker) -> None:
    broker.create_topic("out", 2)
    with broker.transaction() as tx:
        tx.append("out", 0, [(1, None, b"a", ()), (2, None, b"b", ())])
        tx.append_columns("out", 1, [3], [b"k"], [b"c"], [()])
        tx.append("out", 0, [(4, None, b"d", ())])
        tx.commit("g", "in", 3, 42)
    assert tx.first_offsets == [0, 0, 2]
    assert values(broker.read("out", 0, 0)) == [b"a", b"b", b"d"]
    assert broker.committed("g", "in", 3) == 42 and broker.groups() == ["g"]

    with pytest.raises(RuntimeError, match="boom"), broker.transaction() as tx:
        tx.append("out", 0, [(5, None, b"e", ())])
        tx.commit("g", "in", 3, 43)
        raise RuntimeError("boom")
    assert broker.end_offset("out", 0) == 3 and broker.committed("g", "in", 3) == 42

    with (
        pytest.raises(ConfigError, match="topic 'nope' does not exist"),  # checked at once
        broker.transaction() as tx,
    ):
        tx.append("out", 0, [(5, None, b"e", ())])
        tx.append("nope", 0, [(5, None, b"e", ())])
    assert broker.end_offset("out", 0) == 3


def test_a_transaction_touching_a_lost_stream_applies_nothing(broker: RedisBroker) -> None:
    broker.create_topic("out", 2)
    broker.client.delete("rs:{job1}:q:out:1")
    with (
        pytest.raises(RedisDataLostError, match=r"stream rs:\{job1\}:q:out:1 does not exist"),
        broker.transaction() as tx,
    ):
        tx.append("out", 0, [(1, None, b"a", ())])
        tx.commit("g", "in", 0, 7)
        tx.append("out", 1, [(1, None, b"b", ())])
    assert broker.end_offset("out", 0) == 0 and broker.committed("g", "in", 0) == 0
    assert broker.client.exists("rs:{job1}:q:out:1") == 0  # not re-created from offset 0


def test_the_fence_refuses_a_replaced_writer(broker: RedisBroker) -> None:
    broker.create_topic("out", 1)
    fence = broker.key("generation:task-0")
    broker.client.set(fence, "7")
    with broker.transaction(fence=(fence, "7")) as tx:
        tx.append("out", 0, [(1, None, b"a", ())])
        tx.commit("g", "in", 0, 1)
    broker.client.set(fence, "8")  # another worker took the task over
    with (
        pytest.raises(FencedError, match=r"holds '8', not '7'"),
        broker.transaction(fence=(fence, "7")) as tx,
    ):
        tx.append("out", 0, [(2, None, b"b", ())])
        tx.commit("g", "in", 0, 2)
    assert values(broker.read("out", 0, 0)) == [b"a"] and broker.committed("g", "in", 0) == 1
    broker.client.delete(fence)
    with pytest.raises(FencedError, match="holds None"), broker.transaction(fence=(fence, "7")):
        pass  # even an empty transaction checks its fence


# -- restarts ---------------------------------------------------------------------------------


def _write_some(b: RedisBroker) -> None:
    b.create_topic("t", 1)
    b.append("t", 0, [(i, None, b"%d" % i, ()) for i in range(5)])
    b.commit("g", "t", 0, 5)


def test_a_restart_with_persistence_keeps_everything(own_redis: RedisServer) -> None:
    target = RedisTarget.parse(own_redis.url)
    b = RedisBroker.open(target, "job")
    _write_some(b)
    b.close()
    own_redis.restart(signal.SIGKILL)  # a crash: appendfsync always kept every write
    b = RedisBroker.open(target, "job")
    assert values(b.read("t", 0, 0)) == [b"%d" % i for i in range(5)]
    assert b.committed("g", "t", 0) == 5 and b.end_offset("t", 0) == 5
    b.check_not_behind("t", 0, 5)
    b.close()


def test_the_broker_goes_on_after_a_restart(own_redis: RedisServer) -> None:
    b = RedisBroker.open(RedisTarget.parse(own_redis.url), "job")
    _write_some(b)
    own_redis.restart(signal.SIGKILL)
    assert b.end_offset("t", 0) == 5  # a dead idle connection is replaced
    own_redis.restart(signal.SIGKILL)
    assert b.append("t", 0, [(5, None, b"5", ())]) == 5  # (and the scripts loaded again)
    b.close()


def test_a_restart_without_data_is_detected(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", persist=False).start()
    try:
        b = RedisBroker.open(RedisTarget.parse(server.url), "job")
        _write_some(b)
        server.restart(signal.SIGKILL)
        with pytest.raises(RedisDataLostError) as e:
            b.read("t", 0, 5)
        with pytest.raises(RedisDataLostError, match="does not exist"):
            b.append("t", 0, [(1, None, b"x", ())])  # never re-created from offset 0
        b.close()
        again = RedisBroker.open(RedisTarget.parse(server.url), "job")  # a run started again
        again.create_topic("t", 1)  # makes an empty stream; the job knows it reached 5
        with pytest.raises(RedisDataLostError) as behind:
            again.check_not_behind("t", 0, 5)
        again.close()
    finally:
        server.stop()
    for err in (e.value, behind.value):
        assert "rs:{job}:q:t:0" in str(err) and "--fresh" in str(err)
        assert "appendonly yes" in str(err)
    assert "ends at offset 0 but the job had reached offset 5" in str(behind.value)


# -- targets and secrets ----------------------------------------------------------------------


def test_a_target_never_shows_its_password(tmp_path: Path) -> None:
    t = RedisTarget.parse(f"redis://app:{SECRET}@db.example:6380/3")
    assert (t.host, t.port, t.db, t.username, t.password) == ("db.example", 6380, 3, "app", SECRET)
    for text in (str(t), repr(t), t.redacted, f"{t}", f"{t!r}"):
        assert SECRET not in text
    assert t.redacted == "redis://app:***@db.example:6380/3"
    # from the URL: carried to workers (on stdin, never argv) and read back
    assert RedisTarget.from_json(t.to_json()).password == SECRET
    # from a file: only the file's path travels
    pw = tmp_path / "pw"
    pw.write_text(SECRET + "\nignored\n")
    f = RedisTarget.parse("rediss://app:other@db.example/0", password_file=str(pw))
    assert f.password == SECRET and f.tls
    assert SECRET not in f.to_json() and "other" not in f.to_json()
    assert RedisTarget.from_json(f.to_json()) == f
    assert RedisTarget.from_json(f.to_json()).password == SECRET
    assert str(RedisTarget.parse("redis://[::1]:7000")) == "redis://[::1]:7000/0"
    for bad in (
        f"http://u:{SECRET}@h/0",
        f"redis://u:{SECRET}@h:notaport/0",
        f"redis://u:{SECRET}@h/x",
        f"redis://u:{SECRET}@h/0?ssl=1",
    ):
        with pytest.raises(ConfigError) as e:
            RedisTarget.parse(bad)
        assert SECRET not in str(e.value)


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server with a default-user password and an ACL user ``app``."""
    server = RedisServer(tmp_path / "redis", password=SECRET).start()
    redis.Redis(port=server.port, password=SECRET).execute_command(
        "ACL", "SETUSER", "app", "on", f">{SECRET}", "~*", "+@all"
    )
    yield server
    server.stop()


def test_authentication(locked_redis: RedisServer) -> None:
    port = locked_redis.port
    for url in (f"redis://:{SECRET}@127.0.0.1:{port}/0", f"redis://app:{SECRET}@127.0.0.1:{port}"):
        connect(RedisTarget.parse(url)).close()
    for url in (
        f"redis://:{SECRET}x@127.0.0.1:{port}/0",
        f"redis://app:{SECRET}x@127.0.0.1:{port}/0",
        f"redis://127.0.0.1:{port}/0",
    ):
        with pytest.raises(RedisAuthError, match=f"Redis at 127.0.0.1:{port} refused") as e:
            connect(RedisTarget.parse(url))
        assert SECRET not in str(e.value) and SECRET not in repr(e.value)
        assert e.value.__cause__ is None and e.value.__suppress_context__


def test_a_wrong_database_and_an_unreachable_server(redis_server: RedisServer) -> None:
    with pytest.raises(RedisDatabaseError, match="has no database 99"):
        connect(RedisTarget.parse(f"redis://:{SECRET}@127.0.0.1:{redis_server.port}/99"))
    port = free_port()
    with pytest.raises(
        RedisUnreachableError, match=f"cannot reach Redis at 127.0.0.1:{port}: .*refused"
    ) as e:
        connect(RedisTarget.parse(f"redis://u:{SECRET}@127.0.0.1:{port}/0"))
    assert SECRET not in str(e.value)
    assert issubclass(RedisUnreachableError, RedisConfigError)  # the CLI exits 2


def _certificates(d: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1, made with openssl."""
    d.mkdir(parents=True)
    p = {n: d / f"{n}.pem" for n in ("ca", "ca-key", "cert", "key")}

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", str(p["ca-key"]), "-out", str(p["ca"]))  # fmt: skip
    csr = d / "server.csr"
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(p["key"]), "-out", str(csr))  # fmt: skip
    ext = d / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(p["ca"]), "-CAkey", str(p["ca-key"]),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(p["cert"]))  # fmt: skip
    return p


def test_tls(tmp_path: Path) -> None:
    certs = _certificates(tmp_path / "certs")
    port = free_port()
    server = RedisServer(
        tmp_path / "redis",  # plain on server.port (for start()), TLS on ``port``
        extra=("--tls-port", str(port), "--tls-cert-file", str(certs["cert"]),
               "--tls-key-file", str(certs["key"]), "--tls-ca-cert-file", str(certs["ca"]),
               "--tls-auth-clients", "no"),
    ).start()  # fmt: skip
    try:
        url = f"rediss://127.0.0.1:{port}/0"
        b = RedisBroker(connect(RedisTarget.parse(url, tls_ca=str(certs["ca"]))), "tls")
        b.create_topic("t", 1)
        assert b.append("t", 0, [(1, None, b"over tls", ())]) == 0
        b.close()
        with pytest.raises(RedisTLSError, match=r"TLS with Redis at .*certificate verify failed"):
            connect(RedisTarget.parse(url))  # the server's CA is not trusted
    finally:
        server.stop()


def test_importing_the_package_does_not_import_the_redis_client() -> None:
    code = (
        "import sys, rstreams.runtime.queues.redisstreams as r; "
        "assert 'redis' not in sys.modules, 'redis imported'; "
        "r.RedisTarget.parse('redis://h')"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
