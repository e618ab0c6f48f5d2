"""``rstreams offsets`` and ``group describe``: a consumer group's committed offsets
and lag, its live members and the tasks each one holds."""

from __future__ import annotations

import argparse

from rstreams.admin.access import access, open_broker
from rstreams.admin.formatting import print_lag
from rstreams.errors import ConfigError


def cmd_offsets(args: argparse.Namespace) -> int:
    broker = open_broker(args, group=args.group)
    try:
        offsets = broker.group_offsets(args.group)
        if not offsets:
            raise ConfigError(f"group {args.group!r} has committed no offsets")
        print_lag(broker, offsets)
    finally:
        broker.close()
    return 0


def cmd_group(args: argparse.Namespace) -> int:
    found = access(args, group=args.group)
    job = found.job
    group = args.group or job
    broker = found.open_broker()
    try:
        offsets = broker.group_offsets(group)
    finally:
        broker.close()
    m = found.membership(group, "rstreams-cli")  # (None: no such group's directory)
    members = m.describe() if m is not None else {}
    if not members and not offsets:
        raise ConfigError(
            f"group {group!r} does not exist in job {job!r}: it has no live member "
            f"and no committed offset (the job's own group is {job!r})"
        )
    owners = m.task_owners() if m is not None else {}
    generation = m.generation() if m is not None else 0
    print(f"group {group}: generation {generation}, {len(members)} live member(s)")
    for member, info in members.items():
        tasks = sorted(t for t, o in owners.items() if o == member)
        host = f"\thost={info['host']}" if info.get("host") else ""  # (members on Redis)
        print(
            f"  {member}{host}\tpid={info['pid']}\theartbeat {info['heartbeat_age_s']}s ago"
            f"\ttasks: {', '.join(tasks) or 'none'}"
        )
    if offsets:
        broker = found.open_broker()
        try:
            print_lag(broker, offsets, indent="  ")
        finally:
            broker.close()
    found.close()
    return 0
