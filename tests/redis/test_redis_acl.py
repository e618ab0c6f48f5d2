"""An ACL user lacking a command, the job's keys or its pub/sub channel is refused at the
start of a run, in one line naming what is missing (exit 2), instead of workers that
fail at their first commit and are restarted in a loop. A real server, `ACL SETUSER`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redisserver import RedisServer

from rstreams.runtime.queues.redis_preflight import RedisPermissionError, check_permissions
from rstreams.runtime.queues.redisstreams import RedisTarget, connect

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    s = RedisServer(tmp_path_factory.mktemp("redis"), persist=False).start()
    yield s
    s.stop()


def _user(server: RedisServer, name: str, *rules: str) -> RedisTarget:
    admin = redis.Redis(port=server.port)
    admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", *rules)
    return RedisTarget.parse(f"redis://{name}:pw@127.0.0.1:{server.port}/0")


def _missing(target: RedisTarget) -> str:
    with pytest.raises(RedisPermissionError) as e:
        check_permissions(connect(target), target, "wordcount")
    message = str(e.value)
    assert "\n" not in message and "pw" not in message.replace("pwd", "")
    assert "ACL SETUSER" in message and "docs/redis.md" in message
    return message


@pytest.mark.parametrize(
    ("rules", "named"),
    [
        (["~*", "+@all"], "the channel rs:{wordcount}:wordcount:changes"),  # (7.0: no channels)
        (["~other:*", "allchannels", "+@all"], "the keys rs:{wordcount}:*"),
        (["~rs:*", "allchannels", "+@all", "-xsetid"], "the command 'xsetid'"),
        (["~rs:*", "allchannels", "+@all", "-xgroup|create"], "the command 'xgroup|create'"),
        (
            ["~rs:*", "allchannels", "+@all", "-sismember", "-hdel"],
            "'hdel'; the command 'sismember'",
        ),
        (["~rs:*", "allchannels", "+@all", "-@scripting"], "the command 'evalsha'"),
        (["~rs:*", "allchannels", "+@all", "-subscribe"], "the command 'subscribe'"),
        (["~rs:*", "&rs:*", "+@all"], "the keyspace notification pattern __keyspace@0__:rs:"),
    ],
    ids=[
        "no-channels",
        "other-keys",
        "no-xsetid",
        "no-xgroup-create",
        "no-sismember-hdel",
        "no-scripts",
        "no-subscribe",
        "no-keyspace",
    ],
)
def test_a_missing_permission_is_named(server: RedisServer, rules: list[str], named: str) -> None:
    message = _missing(_user(server, "lacking", *rules))
    assert named in message, message
    assert "the Redis user 'lacking' at 127.0.0.1:" in message


def test_the_permissions_a_job_needs_pass_and_leave_no_key(server: RedisServer) -> None:
    target = _user(
        server,
        "enough",
        "~rs:{wordcount}:*",
        "&rs:{wordcount}:*",
        "&__keyspace@0__:rs:{wordcount}:wordcount:member:*",
        "+@read",
        "+@write",
        "+@stream",
        "+@hash",
        "+@set",
        "+@string",
        "+@keyspace",
        "+@scripting",
        "+@pubsub",
        "+@transaction",
        "+@connection",
        "-@dangerous",
        "+info",
    )  # fmt: skip  (the rule of docs/redis.md)
    check_permissions(connect(target), target, "wordcount")
    assert redis.Redis(port=server.port).keys("rs:{wordcount}:preflight*") == []


def test_run_with_a_user_lacking_the_channel_exits_2_in_one_line(
    server: RedisServer, tmp_path: Path
) -> None:
    _user(server, "nochan", "~*", "+@all")
    (tmp_path / "in.txt").write_text("a b\n")
    url = f"redis://nochan:pw@127.0.0.1:{server.port}/0"
    for how in (("--input", str(tmp_path / "in.txt")), ("--join",)):
        r = subprocess.run(
            [sys.executable, "-m", "rstreams", "run", str(ROOT / "examples" / "wordcount.py"),
             *how, "--broker", url,
             "--data-dir", str(tmp_path / "data"), "--workers", "1"],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("rstreams: error: "), r.stderr
        assert "lacks what job 'wordcount' needs: the channel" in r.stderr
        assert "starting a replacement" not in r.stderr and ":pw@" not in r.stderr


@pytest.mark.parametrize("command", ["xtrim", "incr", "multi"])
def test_run_with_a_user_lacking_a_command_of_a_script_or_a_transaction_exits_2(
    server: RedisServer, tmp_path: Path, command: str
) -> None:
    """Before: XTRIM and INCR (sent by Lua scripts) were not checked, and a run failed
    midway on a script error naming neither; without MULTI the check itself failed on
    `EXEC without MULTI`. Now: one line naming the command, before the run does anything."""
    _user(server, f"no{command}", "~*", "allchannels", "+@all", f"-{command}")
    (tmp_path / "in.txt").write_text("a b\n")
    url = f"redis://no{command}:pw@127.0.0.1:{server.port}/0"
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", str(ROOT / "examples" / "wordcount.py"),
         "--input", str(tmp_path / "in.txt"), "--broker", url,
         "--data-dir", str(tmp_path / "data"), "--workers", "1"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("rstreams: error: "), r.stderr
    assert f"lacks what job 'wordcount' needs: the command '{command}'. Grant" in r.stderr
    assert "Traceback" not in r.stderr and ":pw@" not in r.stderr
    assert redis.Redis(port=server.port).keys("rs:{wordcount}:*") == []  # (nothing done)
