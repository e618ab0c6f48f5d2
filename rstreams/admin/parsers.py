"""The admin commands' parsers, by command family: topics (and their check and repair),
the records of a topic (produce, consume), a group's offsets, state stores and a
group's members. Each command's ``func`` is its ``cmd_*`` wrapped by
:func:`rstreams.admin.access.on_data_dir`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rstreams.admin.access import on_data_dir
from rstreams.admin.groups import cmd_group, cmd_offsets
from rstreams.admin.records import cmd_consume, cmd_produce
from rstreams.admin.stores import cmd_state
from rstreams.admin.topics import cmd_topics
from rstreams.brokeropts import add_broker_options
from rstreams.config import DEFAULT_DATA_DIR
from rstreams.runtime.layout import job_id_arg

#: What adds the options every admin command takes to a command's parser.
Base = Callable[[argparse.ArgumentParser], None]


def add_parsers(sub: Any, common: Any) -> None:
    """The log commands' parsers: topics, produce, consume, offsets, state and group."""

    def base(p: argparse.ArgumentParser) -> None:
        _job_options(p, common)

    _add_topics_parser(sub, base)
    _add_record_parsers(sub, base)
    _add_offsets_parser(sub, base)
    _add_state_parser(sub, base)
    _add_group_parser(sub, base)


def _job_options(p: argparse.ArgumentParser, common: Any) -> None:
    """--data-dir, --job, the broker's options and ``common`` (-q, -v)."""
    p.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help=f"default ./{DEFAULT_DATA_DIR}",
    )
    p.add_argument(
        "--job",
        default=None,
        type=job_id_arg,
        help="the job whose log to use (DIR/JOB, or its Redis keys)",
    )
    add_broker_options(p)
    common(p)


def _add_topics_parser(sub: Any, base: Base) -> None:
    p = sub.add_parser(
        "topics",
        help="list, create, describe, check or repair topics of a job's log",
        description=(
            "check: verify every frame of every queue (of TOPIC, default all) and every "
            "committed offset; exit 1 if anything is damaged. repair: cut queue --queue of "
            "TOPIC at offset --truncate-at (records from there on are removed) and report "
            "what that affects; the job's next run must then be --fresh. "
            "See docs/state.md#recovering-from-damage."
        ),
    )
    p.add_argument(
        "action",
        choices=("list", "create", "describe", "check", "repair"),
        help="what to do (see the description above)",
    )
    p.add_argument(
        "name", nargs="?", metavar="TOPIC", help="the topic (check: default every topic)"
    )
    p.add_argument("--queues", type=int, default=1, help="queues of a new topic (default 1)")
    p.add_argument("--compacted", action="store_true", help="create a compacted topic")
    p.add_argument("--queue", type=int, metavar="Q", help="repair: the queue to cut")
    p.add_argument(
        "--truncate-at", type=int, metavar="OFFSET", help="repair: the first offset to remove"
    )
    base(p)
    p.set_defaults(
        func=on_data_dir(
            cmd_topics,
            read_only=lambda args: args.action == "check",
            creates=lambda args: args.action == "create",
        )
    )


def _add_record_parsers(sub: Any, base: Base) -> None:
    """``produce`` and ``consume``: a topic's records in and out."""
    p = sub.add_parser("produce", help="append stdin lines to a topic (one record per line)")
    p.add_argument("topic", help="the topic to append to (created if new)")
    p.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE")
    p.add_argument("--queues", type=int, default=1, help="queues if the topic is new")
    base(p)
    p.set_defaults(func=on_data_dir(cmd_produce, creates=lambda args: True))

    p = sub.add_parser("consume", help="print records of a topic")
    p.add_argument("topic", help="the topic to read")
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the first record (default: at the end, printing only what arrives)",
    )
    p.add_argument("--group", help="start at the group's committed offsets and commit after")
    p.add_argument("--offset", type=int, help="start at this offset (of each queue read)")
    p.add_argument("--queue", type=int, help="read only this queue")
    p.add_argument("--max", type=int, default=None, metavar="N", help="stop after N records")
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: KEY<tab>VALUE as stored; json: one object per record, "
        '{"queue", "offset", "timestamp", "key", "value"}, key and value as the JSON values '
        'the topic\'s serde holds (a windowed key as "key" plus '
        '"window": {"start", "end"} and "closed")',
    )
    base(p)
    p.set_defaults(func=on_data_dir(cmd_consume))


def _add_offsets_parser(sub: Any, base: Base) -> None:
    p = sub.add_parser("offsets", help="committed offsets and lag of a consumer group")
    p.add_argument("group", help="the consumer group (a job's group is named after the job)")
    base(p)
    p.set_defaults(func=on_data_dir(cmd_offsets))


def _add_state_parser(sub: Any, base: Base) -> None:
    p = sub.add_parser("state", help="list, read or dump a job's state stores")
    p.add_argument(
        "action",
        choices=("list", "get", "dump", "sizes"),
        help="list the stores, get one key's value, dump a store, or count what a store "
        "holds per queue (a join without window: keys, versions of its history, records "
        "waiting for stream time)",
    )
    p.add_argument("store", nargs="?", help="for get, dump and sizes: the state store")
    p.add_argument("key", nargs="?", help="for get: the key (JSON, or plain text)")
    p.add_argument("--queue", type=int, help="only this queue")
    base(p)
    p.set_defaults(func=on_data_dir(cmd_state, read_only=lambda args: True))


def _add_group_parser(sub: Any, base: Base) -> None:
    p = sub.add_parser("group", help="members and tasks of a job's consumer group")
    p.add_argument("action", choices=("describe",), help="show live members and task locks")
    p.add_argument("group", nargs="?", help="default: the job id")
    base(p)
    p.set_defaults(func=on_data_dir(cmd_group))
