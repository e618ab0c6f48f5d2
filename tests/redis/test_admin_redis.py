"""The admin commands on a Redis broker (``--broker URL``): produce, consume, topics,
offsets, group describe, state and top, against a real password-protected redis-server.

Every command's output and errors are checked for the password; a server that can not
be reached, a refused password, a database the server does not have and a missing topic
each give one line and exit 2.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redisserver import RedisServer, free_port

from rstreams.cli import main

PASSWORD = "s3cret-Pa55"  # in no output, ever


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    s = RedisServer(tmp_path_factory.mktemp("redis-admin"), password=PASSWORD)
    s.start()
    yield s
    s.stop()


@pytest.fixture
def broker(server: RedisServer, tmp_path: Path) -> list[str]:
    """The options naming a flushed database of ``server`` (its password in a file)."""
    import redis

    redis.Redis(port=server.port, password=PASSWORD).flushdb()
    secret = tmp_path / "redis.pass"
    secret.write_text(PASSWORD + "\n")
    return [
        "--broker", f"redis://127.0.0.1:{server.port}/0",
        "--broker-password-file", str(secret),
        "--data-dir", str(tmp_path / "data"),
    ]  # fmt: skip


def cli(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    stdin: bytes | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``rstreams ARGV``, checked for the password."""
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(argv)
    out, err = capsys.readouterr()
    assert PASSWORD not in out and PASSWORD not in err
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one error line of a command that must exit 2."""
    code, _, err = cli(capsys, argv)
    assert code == 2, err
    assert err.startswith("rstreams: error: ") and err.count("\n") == 1, err
    return err


def test_produce_then_consume_round_trip(capsys, monkeypatch, broker):
    lines = b"alpha\nk1:beta\ngamma\n"
    code, _, err = cli(
        capsys, ["produce", "notes", "--job", "scratch", "--queues", "2",
                 "--key-separator", ":", *broker], lines, monkeypatch,
    )  # fmt: skip
    assert code == 0, err
    assert "produced 3 records to notes" in err
    code, out, err = cli(capsys, ["consume", "notes", "--from-beginning", *broker])
    assert code == 0, err
    assert sorted(out.splitlines()) == ["alpha", "gamma", "k1\tbeta"]
    # json: queue and offset of each record, as on the file log
    code, out, _ = cli(
        capsys, ["consume", "notes", "--from-beginning", "--format", "json", "--queue", "0",
                 "--max", "1", *broker],
    )  # fmt: skip
    assert code == 0 and '"offset": 0' in out and '"queue": 0' in out
    # a group commits where it stopped: the next read starts there
    code, out, _ = cli(capsys, ["consume", "notes", "--group", "readers", *broker])
    assert code == 0 and len(out.splitlines()) == 3
    code, out, _ = cli(capsys, ["consume", "notes", "--group", "readers", *broker])
    assert code == 0 and out == ""
    code, out, _ = cli(capsys, ["offsets", "readers", *broker])
    assert code == 0, out
    rows = [line.split("\t") for line in out.splitlines()[1:]]
    assert [r[0] for r in rows] == ["notes"] * len(rows) and {r[4] for r in rows} == {"0"}
    assert sum(int(r[2]) for r in rows) == 3  # (committed = end on every queue)


def test_topics_list_create_describe(capsys, broker):
    assert cli(capsys, ["topics", "create", "t", "--queues", "3", "--job", "j", *broker])[0] == 0
    code, out, _ = cli(capsys, ["topics", "list", *broker])
    assert code == 0 and out == "t\tqueues=3\trecords=0\n"
    code, out, _ = cli(capsys, ["topics", "describe", "t", *broker])
    assert code == 0 and out.splitlines()[0] == "topic t: 3 queues"
    assert "queue 2: offsets 0..0 (0 records)" in out


def test_a_job_is_found_by_what_the_command_names(capsys, monkeypatch, broker, server):
    for job, topic in (("one", "a"), ("two", "b")):
        code, _, err = cli(capsys, ["produce", topic, "--job", job, *broker], b"x\n", monkeypatch)
        assert code == 0, err
    code, out, _ = cli(capsys, ["consume", "b", "--from-beginning", *broker])
    assert code == 0 and out == "x\n"
    # the password in the URL: shown nowhere either
    url = ["--broker", f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"]
    code, out, _ = cli(capsys, ["consume", "a", "--from-beginning", *url, *broker[4:]])
    assert code == 0 and out == "x\n"
    err = refused(capsys, ["topics", "list", *broker])
    assert "several jobs (one, two); pick one with --job" in err


def _commit_and_join(server: RedisServer, job: str) -> object:
    """What a small run leaves in Redis: a topic with records, the job's group offsets
    committed through the broker, one live member holding a task."""
    from rstreams.runtime.queues.redisstreams import RedisBroker, RedisTarget, connect
    from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership

    target = RedisTarget.parse(f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0")
    broker = RedisBroker.open(target, job)
    broker.create_topic("sentences", 2)
    broker.append("sentences", 0, [(1, None, b"a b", ()), (2, None, b"c", ())])
    broker.append("sentences", 1, [(3, None, b"d", ())])
    broker.commit(job, "sentences", 0, 1)
    broker.commit(job, "sentences", 1, 1)
    broker.close()
    member = RedisGroupMembership(connect(target), job, job, "w0-1")
    member.join()
    assert member.acquire_task("0_0") and member.acquire_task("0_1")
    return member


def test_offsets_and_group_describe(capsys, broker, server):
    member = _commit_and_join(server, "wc")
    try:
        code, out, err = cli(capsys, ["offsets", "wc", *broker])
        assert code == 0, err
        assert out.splitlines() == [
            "topic\tqueue\tcommitted\tend\tlag", "sentences\t0\t1\t2\t1", "sentences\t1\t1\t1\t0"
        ]  # fmt: skip
        code, out, err = cli(capsys, ["group", "describe", *broker])
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("group wc: generation") and "1 live member(s)" in lines[0]
        assert lines[1].startswith("  w0-1\t") and "tasks: 0_0, 0_1" in lines[1]
        assert "  sentences\t0\t1\t2\t1" in lines
        err = refused(capsys, ["group", "describe", "nope", "--job", "wc", *broker])
        assert "group 'nope' does not exist in job 'wc'" in err
    finally:
        member.leave()  # type: ignore[attr-defined]


def test_top_once_reads_the_queues_and_members_from_redis(capsys, broker, server):
    member = _commit_and_join(server, "wc")
    try:
        code, out, err = cli(capsys, ["top", "wc", "--once", *broker])
        assert code == 0, err
        assert out.startswith("wc:") and "1 members" in out and "lag 1" in out, out
    finally:
        member.leave()  # type: ignore[attr-defined]


def test_state_reads_the_changelog_in_redis(capsys, broker, server):
    from rstreams.runtime.queues.redisstreams import RedisBroker, RedisTarget
    from rstreams.serde import INTERNAL_SERDE

    target = RedisTarget.parse(f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0")
    b = RedisBroker.open(target, "wc")
    b.create_topic("wc-count-changelog", 1, compacted=True)
    k = INTERNAL_SERDE.serialize
    updates = [("the", 1), ("cat", 1), ("the", 2), ("cat", None)]  # (cat: deleted)
    b.append(
        "wc-count-changelog",
        0,
        [(t, k(key), None if n is None else k(n), ()) for t, (key, n) in enumerate(updates)],
    )
    b.close()
    code, out, _ = cli(capsys, ["state", "list", *broker])
    assert code == 0 and out == "wc-count-store\tqueues=1\n"
    code, out, _ = cli(capsys, ["state", "get", "wc-count-store", "the", *broker])
    assert code == 0 and out == "2\n"
    code, out, _ = cli(capsys, ["state", "dump", "wc-count-store", *broker])
    assert code == 0 and out == '{"queue": 0, "key": "the", "value": 2}\n'
    err = refused(capsys, ["state", "dump", "other-store", "--job", "wc", *broker])
    assert "no store 'other-store'" in err


def test_failures_are_one_line_and_exit_2(capsys, broker, server, tmp_path):
    port = server.port
    data = ["--data-dir", str(tmp_path / "data")]
    wrong = tmp_path / "wrong.pass"
    wrong.write_text("not-" + PASSWORD)
    commands = [
        ["topics", "list", "--job", "j"], ["consume", "t", "--job", "j", "--from-beginning"],
        ["offsets", "g", "--job", "j"], ["group", "describe", "--job", "j"],
        ["state", "list", "--job", "j"], ["top", "j", "--once"],
    ]  # fmt: skip
    for command in commands:
        # no password, a wrong one (in the URL, or in a file)
        err = refused(capsys, [*command, "--broker", f"redis://127.0.0.1:{port}/0", *data])
        assert "refused the credentials" in err
        err = refused(
            capsys, [*command, "--broker", f"redis://:{PASSWORD}x@127.0.0.1:{port}/0", *data]
        )
        assert "refused the credentials" in err and "redis://:***@" in err
        err = refused(
            capsys,
            [*command, "--broker", f"redis://127.0.0.1:{port}/0",
             "--broker-password-file", str(wrong), *data],
        )  # fmt: skip
        assert "refused the credentials" in err
        # a database the server does not have; nothing listening
        err = refused(
            capsys, [*command, "--broker", f"redis://:{PASSWORD}@127.0.0.1:{port}/99", *data]
        )
        assert "no database 99" in err
        err = refused(
            capsys, [*command, "--broker", f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0", *data]
        )
        assert "cannot reach" in err
    # a missing topic, store or group in an existing job
    assert cli(capsys, ["topics", "create", "t", "--job", "j", *broker])[0] == 0
    assert "topic 'nope' does not exist" in refused(
        capsys, ["consume", "nope", "--job", "j", *broker]
    )
    assert "has committed no offsets" in refused(capsys, ["offsets", "g", "--job", "j", *broker])


def test_what_works_on_log_files_only_refuses_the_broker(capsys, broker):
    for action in (["check"], ["repair", "t", "--queue", "0", "--truncate-at", "1"]):
        err = refused(capsys, ["topics", *action, "--job", "j", *broker])
        assert f"topics {action[0]} does not work with --broker" in err
    err = refused(capsys, ["topics", "list", "--broker-password-file", "x"])
    assert "--broker-password-file goes with --broker URL" in err


def test_an_error_reply_in_a_command_is_one_line(capsys, broker, server):
    import redis

    # keys of the job that are not what the broker keeps there (written by another program)
    redis.Redis(port=server.port, password=PASSWORD).set("rs:{j}:topics", "not a hash")
    err = refused(capsys, ["topics", "list", "--job", "j", *broker])
    assert "the Redis broker redis://:***@127.0.0.1" in err and "WRONGTYPE" in err


def test_top_of_a_job_redis_does_not_have(capsys, broker):
    code, _, err = cli(capsys, ["top", "nope", "--once", *broker])
    assert code == 2 and "no job 'nope' in redis://:***@127.0.0.1" in err, err


def test_the_commands_after_a_run_over_redis(capsys, broker, tmp_path):
    import collections
    import re
    import subprocess

    root = Path(__file__).resolve().parents[2]
    corpus = root / "examples" / "data" / "corpus.txt"
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", str(root / "examples" / "wordcount.py"),
         "--input", str(corpus), "--workers", "2", *broker, "-q"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert PASSWORD not in r.stdout + r.stderr
    words = re.findall(r"\w+", corpus.read_text(encoding="utf-8").lower())
    lines = len(corpus.read_text(encoding="utf-8").splitlines())
    code, out, _ = cli(capsys, ["topics", "list", *broker])
    assert code == 0 and re.search(rf"^sentences\tqueues=\d+\trecords={lines}$", out, re.M), out
    # everything read was committed: lag 0 on every input queue
    code, out, _ = cli(capsys, ["offsets", "wordcount", *broker])
    rows = [line.split("\t") for line in out.splitlines()[1:]]
    assert code == 0 and rows and all(row[4] == "0" for row in rows), out
    assert sum(int(row[2]) for row in rows if row[0] == "sentences") == lines
    code, out, _ = cli(capsys, ["group", "describe", *broker])
    assert code == 0 and out.startswith("group wordcount: generation "), out
    assert "0 live member(s)" in out.splitlines()[0]  # (the run is over)
    # the store as its changelog in Redis holds it
    code, out, _ = cli(capsys, ["state", "list", *broker])
    store = out.split("\t")[0]
    assert code == 0 and store.endswith("-store"), out
    counts = collections.Counter(words)
    code, out, _ = cli(capsys, ["state", "get", store, "the", *broker])
    assert code == 0 and out == f"{counts['the']}\n"
    code, out, _ = cli(capsys, ["consume", "word-counts", "--from-beginning", "--max", "3",
                                "--format", "json", *broker])  # fmt: skip
    assert code == 0 and len(out.splitlines()) == 3
    # top: the queues from Redis, the statistics this host's run left in --data-dir
    code, out, err = cli(capsys, ["top", "--once", *broker])
    assert code == 0 and out.startswith("wordcount done:") and "lag 0" in out, out + err


def test_no_password_in_debug_logs(server, broker):
    """-vv logs what the Redis client says too (a subprocess: pytest holds the logging)."""
    import subprocess

    url = ["--broker", f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0", *broker[4:]]
    commands = [
        ["produce", "t", "--job", "j"], ["consume", "t", "--from-beginning"], ["topics", "list"],
        ["offsets", "j"], ["group", "describe"], ["state", "list"], ["top", "--once"],
    ]  # fmt: skip
    for command in commands:
        r = subprocess.run(
            [sys.executable, "-m", "rstreams", *command, *url, "-vv"],
            input="a\n", capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert PASSWORD not in r.stdout + r.stderr
        assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr
