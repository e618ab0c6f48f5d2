"""A subscription consumer in a process of its own, for the cross-process tests.

Run as ``python subconsumer.py '<json config>'``: it opens a FileBroker (or a
RedisBroker when the config names a ``job``) and a
``Subscription(..., redis=url)``, then answers one JSON line on stdout per JSON command
line on stdin. :class:`RemoteConsumer` starts and drives one (and SIGKILLs it by pid).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any


def _message(m: Any) -> list[Any]:
    key = None if m.key is None else m.key.decode()
    value = None if m.value is None else m.value.decode()
    return [m.queue, m.offset, key, value, m.redelivery_count]


def _handle(sub: Any, consumers: dict[str, Any], cmd: dict[str, Any]) -> Any:
    op = cmd["op"]
    if op == "subscribe":
        ranges = cmd.get("ranges")
        consumers[cmd["name"]] = sub.subscribe(
            cmd["name"], cmd.get("priority", 0), hash_ranges=ranges and [tuple(r) for r in ranges]
        )
        return True
    if op == "active":
        active = sub.active_consumer(cmd["queue"])
        return None if active is None else active.name
    if op == "consumers":
        return [c.name for c in sub.consumers]
    # (without a name: the consumer this process subscribed last)
    consumer = consumers[cmd["name"]] if "name" in cmd else list(consumers.values())[-1]
    if op == "receive":
        return [_message(m) for m in consumer.receive(cmd["n"], cmd.get("timeout", 0.0))]
    ids = [tuple(i) for i in cmd.get("ids", ())]
    if op == "ack":
        consumer.ack(ids)
    elif op == "ack_cumulative":
        consumer.ack_cumulative(ids[0])
    elif op == "nack":
        consumer.negative_acknowledge(ids)
    elif op == "close":
        consumer.close()
    else:
        raise ValueError(f"unknown op {op!r}")
    return True


def main() -> None:
    from rstreams.runtime.queues import FileBroker
    from rstreams.runtime.queues.redisstreams import RedisBroker, RedisTarget
    from rstreams.runtime.subscriptions import Subscription

    cfg = json.loads(sys.argv[1])
    if cfg.get("job"):  # the records in Redis too: a RedisBroker of that job
        broker: Any = RedisBroker.open(RedisTarget.parse(cfg["redis"]), cfg["job"])
    else:
        broker = FileBroker(cfg["broker"])
    sub = Subscription(
        broker,
        cfg["topic"],
        cfg["subscription"],
        cfg["type"],
        redis=cfg["redis"],
        consumer_ttl=cfg.get("ttl", 10.0),
        key_shared_selector=cfg.get("selector", "consistent_hashing"),
        receiver_queue_size=cfg.get("receiver_queue_size", 1000),
    )
    consumers: dict[str, Any] = {}
    print(json.dumps({"ok": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            reply = {"ok": _handle(sub, consumers, cmd)}
        except Exception as e:
            reply = {"error": type(e).__name__, "message": str(e)}
        print(json.dumps(reply), flush=True)


class RemoteError(Exception):
    """An error the consumer process answered with (``kind`` is its class name)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


class RemoteConsumer:
    """A process with one Subscription; ``call(op, **args)`` runs a command there."""

    def __init__(self, **cfg: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reply()

    def _reply(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"consumer process exited with {self.proc.wait()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RemoteError(reply["error"], reply["message"])
        return reply["ok"]

    def call(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def kill(self) -> None:
        """SIGKILL: no close, no more heartbeats."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


if __name__ == "__main__":
    main()
