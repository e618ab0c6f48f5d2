"""``rstreams produce`` and ``consume``: append stdin lines to a topic, each to the
queue every rstreams producer picks, and print a topic's records (from the end, the
beginning, an offset or a group's committed offsets)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator

from rstreams.admin.access import check_topic_name, known_queues, open_broker
from rstreams.admin.formatting import json_line, text_line, topic_serdes
from rstreams.errors import ConfigError
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.layout import JobLayout
from rstreams.runtime.queues.base import LogRecord
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.queues.mapper import ModuloQueueMapper


def cmd_produce(args: argparse.Namespace) -> int:
    check_topic_name(args.topic)
    broker = open_broker(args, create=True, topic=args.topic)
    try:
        if broker.queue_count(args.topic) is None:
            broker.create_topic(args.topic, args.queues)
        n = known_queues(broker, args.topic)
        producer = Producer(broker)
        route = ModuloQueueMapper().route
        count = 0
        chunk: list[tuple[int, bytes | None, bytes]] = []
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            key: bytes | None = None
            if args.key_separator:
                k, sep, v = line.partition(args.key_separator.encode())
                key, line = (k, v) if sep else (None, line)
            chunk.append((int(time.time() * 1000), key, line))
            count += 1
            if len(chunk) == 10_000:  # keyless lines: one queue per 10,000 lines, in turn
                _produce(producer, route, args.topic, n, chunk, (count - 1) // 10_000)
                chunk = []
        _produce(producer, route, args.topic, n, chunk, count // 10_000)
        broker.flush()
        if not args.quiet:
            print(f"produced {count} records to {args.topic}", file=sys.stderr)
    finally:
        broker.close()
    return 0


def _produce(
    producer: Producer,
    route: Callable[[list[bytes | None], int, int], int | list[int]],
    topic: str,
    queues: int,
    chunk: list[tuple[int, bytes | None, bytes]],
    turn: int,
) -> None:
    """Append ``chunk``'s (timestamp, key, value) lines to ``topic``, each to the queue
    every rstreams producer picks (keyless lines: queue ``turn`` modulo the count)."""
    if not chunk:
        return
    timestamps = [t for t, _, _ in chunk]
    keys = [k for _, k, _ in chunk]
    values: list[bytes | None] = [v for _, _, v in chunk]
    qs = route(keys, queues, turn % queues)
    producer.send_routed(topic, qs, timestamps, keys, values, [()] * len(keys))
    producer.flush()


def _records(
    broker: Broker, topic: str, queue: int, start: int, limit: int | None
) -> Iterator[LogRecord]:
    pos = start
    while limit is None or limit > 0:
        batch = broker.read(topic, queue, pos, 10_000 if limit is None else min(limit, 10_000))
        if not batch:
            return
        yield from batch
        if limit is not None:
            limit -= len(batch)
        pos = batch[-1].offset + 1


def cmd_consume(args: argparse.Namespace) -> int:
    check_topic_name(args.topic)
    if args.offset is not None and args.offset < 0:
        raise ConfigError(f"--offset must be >= 0; got {args.offset}")
    broker = open_broker(args, topic=args.topic)
    try:
        n = known_queues(broker, args.topic)
        kserde, vserde = topic_serdes(JobLayout.of(args.data_dir, args.job).root, args.topic)
        queues = [args.queue] if args.queue is not None else list(range(n))
        left = args.max
        for q in queues:
            if args.offset is not None:
                start = args.offset
            elif args.from_beginning:
                start = broker.start_offset(args.topic, q)
            elif args.group:
                start = broker.committed(args.group, args.topic, q)
            else:
                start = broker.end_offset(args.topic, q)
            pos = start
            for r in _records(broker, args.topic, q, start, left):
                if args.format == "json":
                    print(json_line(q, r, kserde, vserde))
                else:
                    print(text_line(r))
                pos = r.offset + 1
                if left is not None:
                    left -= 1
            if args.group and pos != start:
                broker.commit(args.group, args.topic, q, pos)
            if left is not None and left <= 0:
                break
        broker.flush()
    finally:
        broker.close()
    return 0
