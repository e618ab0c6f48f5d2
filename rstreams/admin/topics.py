"""``rstreams topics``: list, create and describe the topics of a job's log; ``check``
and ``repair`` go to :mod:`rstreams.admin.repair` (the file log only)."""

from __future__ import annotations

import argparse
import sys

from rstreams.admin.access import check_topic_name, known_queues, open_broker
from rstreams.admin.repair import check, repair
from rstreams.brokeropts import refuse_broker
from rstreams.errors import ConfigError

#: The actions of the file log only: what they do, and why a Redis broker has no such.
_FILE_LOG_ONLY = {
    "check": (
        check,
        "it reads the file log's segment files; Redis keeps no such files (check the "
        "server's own persistence with redis-check-aof)",
    ),
    "repair": (
        repair,
        "it cuts the file log's segment files; a Redis stream has none (rebuild the job "
        "with `rstreams run ... --fresh`)",
    ),
}


def cmd_topics(args: argparse.Namespace) -> int:
    if args.action in _FILE_LOG_ONLY:
        action, why = _FILE_LOG_ONLY[args.action]
        refuse_broker(args, f"topics {args.action}", why)
        return action(args)
    if args.action in ("create", "describe"):
        check_topic_name(args.name)
    broker = open_broker(
        args, create=args.action == "create", topic=args.name if args.action == "describe" else None
    )
    try:
        if args.action == "list":
            for name, queues in sorted(broker.topics().items()):
                records = sum(
                    broker.end_offset(name, q) - broker.start_offset(name, q) for q in range(queues)
                )
                print(f"{name}\tqueues={queues}\trecords={records}")
        elif args.action == "create":
            if not args.name:
                raise ConfigError("topics create needs a topic name")
            broker.create_topic(args.name, args.queues, compacted=args.compacted)
            if not args.quiet:
                print(f"created {args.name} ({args.queues} queues)", file=sys.stderr)
        else:
            if not args.name:
                raise ConfigError("topics describe needs a topic name")
            n = known_queues(broker, args.name)
            print(f"topic {args.name}: {n} queues")
            for q in range(n):
                start, end = broker.start_offset(args.name, q), broker.end_offset(args.name, q)
                print(f"  queue {q}: offsets {start}..{end} ({end - start} records)")
    finally:
        broker.close()
    return 0
