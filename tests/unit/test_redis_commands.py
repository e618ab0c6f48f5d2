"""The Redis permission check (redis_preflight.COMMANDS) tries exactly the commands the
runtime sends: collected here from the code, the Redis client's calls and the Lua
scripts' ``redis.call`` (EVALSHA runs them with the user's ACL), so a command added to
the code and not to the check fails this test instead of failing a run midway."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

# (redis.client, not redis: see tests/redis/conftest.py)
pytest.importorskip("redis.client", reason="needs pip install 'rstreams[redis]'")

from redis.commands.core import CoreCommands

from rstreams.runtime.queues.redis_preflight import COMMANDS

PACKAGE = Path(__file__).resolve().parents[2] / "rstreams"
#: Not the job's user's commands: the Spark backend reads and writes a pipeline's own
#: streams (no job keys), and the check itself.
SKIPPED = ("runtime/spark/", "runtime/queues/redis_preflight.py")
#: Commands whose first argument is a subcommand (ACL rules name ``xgroup|create``).
CONTAINERS = {"xgroup", "xinfo", "script", "client", "config", "object", "memory", "function"}
#: What the names of a Redis client (or its pipelines and subscriptions) are in the code.
RECEIVERS = {"client", "_client", "c", "r", "pipe", "sub", "conn", "redis"}
#: Client methods that send other commands than their name says.
SENDS = {
    "register_script": {"evalsha", "script|load"},  # (redis.commands.core.Script)
    "pipeline": {"multi", "exec"},  # (transaction=True unless told otherwise)
    "multi": {"multi", "exec"},
    "watch": {"watch", "unwatch"},  # (the pipeline's reset sends UNWATCH)
    "scan_iter": {"scan"},
    "delete": {"del"},
    "subscribe": {"subscribe"},
    "psubscribe": {"psubscribe"},
}
LUA = re.compile(r"""redis\.p?call\(\s*['"](\w+)['"](?:\s*,\s*['"](\w+)['"])?""")


def _name(command: str, sub: str | None) -> str:
    command = command.lower()
    return f"{command}|{sub.lower()}" if command in CONTAINERS and sub else command


def _of_method(method: str, call: ast.Call) -> set[str]:
    if method == "pipeline":
        if any(k.arg == "transaction" and getattr(k.value, "value", True) is False
               for k in call.keywords):  # fmt: skip
            return set()
        return SENDS[method]
    if method in SENDS:
        return SENDS[method]
    command, _, sub = method.partition("_")
    return {_name(command, sub) if command in CONTAINERS else method}


def _receiver(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def sent_commands() -> dict[str, set[str]]:
    """Each command the runtime's code sends to Redis -> the modules that send it."""
    methods = {m for m in dir(CoreCommands) if not m.startswith("_")} | set(SENDS)
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith(SKIPPED):
            continue
        source = path.read_text()
        for m in LUA.finditer(source):
            found.setdefault(_name(m[1], m[2]), set()).add(where)
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = node.func.attr
            if _receiver(node.func.value) not in RECEIVERS:
                continue
            if method == "execute_command" and node.args:
                first = node.args[0]
                sub = node.args[1] if len(node.args) > 1 else None
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    text = sub.value if isinstance(sub, ast.Constant) else None
                    found.setdefault(_name(first.value, text), set()).add(where)
            elif method in methods:
                for command in _of_method(method, node):
                    found.setdefault(command, set()).add(where)
    return found


def test_the_collector_finds_what_the_runtime_is_known_to_send() -> None:
    sent = sent_commands()
    # (a few from each place: Python calls, pipelines, scripts, subcommands in Lua)
    assert {"hgetall", "sismember", "scan", "ping", "info", "multi", "watch"} <= set(sent)
    assert {"xtrim", "incr", "rename", "xsetid", "xgroup|create", "xinfo|stream"} <= set(sent)
    assert {"evalsha", "script|load", "subscribe", "psubscribe"} <= set(sent)
    assert "runtime/queues/redisstreams/scripts.py" in sent["xtrim"]


def test_the_permission_check_tries_every_command_the_runtime_sends() -> None:
    sent = sent_commands()
    untried = {c: sorted(w) for c, w in sent.items() if c not in COMMANDS}
    assert not untried, f"add these to redis_preflight._probes: {untried}"
    # (and nothing the runtime no longer sends: a user need not be granted it)
    assert not COMMANDS - set(sent), f"no longer sent: {sorted(COMMANDS - set(sent))}"
