"""``rstreams state``: list a job's state stores, get one key's value, dump a store or
count what it holds per queue, from its changelog (the file log, or Redis)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from rstreams.admin.access import access
from rstreams.errors import ConfigError
from rstreams.runtime.queues.broker import Broker


def _key_arg(text: str) -> Any:
    """A key typed on the command line: JSON if it parses (42, "x", [1, 2]), else text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def cmd_state(args: argparse.Namespace) -> int:
    found = access(args, store=args.store)
    # (the file log: inspect opens it; Redis: the job's changelogs in the broker)
    broker = found.open_broker() if found.redis else None
    try:
        return _state(args, found.data_dir, found.job, broker)
    finally:
        if broker is not None:
            broker.close()


def _state(args: argparse.Namespace, data_dir: str, job: str, broker: Broker | None) -> int:
    from rstreams.state import inspect

    if args.action == "list":
        for store, queues in inspect.list_stores(data_dir, job, broker=broker).items():
            print(f"{store}\tqueues={queues}")
        return 0
    if not args.store:
        raise ConfigError(f"state {args.action} needs a store name (see: rstreams state list)")
    if args.action == "get":
        if args.key is None:
            raise ConfigError("state get needs a KEY")
        key = _key_arg(args.key)
        table = inspect.load_store(data_dir, job, args.store, queue=args.queue, broker=broker)
        if key not in table:
            print(f"rstreams: key {key!r} not found in {args.store}", file=sys.stderr)
            return 1
        print(json.dumps(table[key], ensure_ascii=False))
        return 0
    rows = inspect.iter_store(data_dir, job, args.store, queue=args.queue, broker=broker)
    if args.action == "sizes":
        for q, counts in sorted(_store_sizes(rows).items()):
            print(f"queue={q}\t" + "\t".join(f"{k}={v}" for k, v in counts.items()))
        return 0
    for q, k, v in rows:
        print(json.dumps({"queue": q, "key": k, "value": v}, ensure_ascii=False))
    return 0


def _store_sizes(rows: Iterable[tuple[int, Any, Any]]) -> dict[int, dict[str, int]]:
    """Per queue: entries; for a temporal join's store (rstreams.semantics.temporal)
    also its keys, their versions and the records waiting to be answered."""
    out: dict[int, dict[str, int]] = {}
    for q, k, v in rows:
        counts = out.setdefault(q, {"entries": 0})
        counts["entries"] += 1
        tag = k[0] if isinstance(k, (list, tuple)) and k else None
        if tag == "v" and len(k) == 3:
            counts["join_keys"] = counts.get("join_keys", 0) + 1
            counts["join_versions"] = counts.get("join_versions", 0) + len(v)
        elif tag == "p" and len(k) == 5:
            counts["join_waiting"] = counts.get("join_waiting", 0) + 1
    return out
