"""``rstreams topics check`` and ``topics repair``: find the damage in a job's file log
(every frame of every queue, every committed offset) and cut a queue at a damaged
offset, reporting the groups, stores and job that the cut affects."""

from __future__ import annotations

import argparse
import sys

from rstreams.admin.access import job_root
from rstreams.errors import ConfigError
from rstreams.runtime.layout import JobLayout


def check(args: argparse.Namespace) -> int:
    """``topics check``: exit 1 when anything is damaged, with the repair to run."""
    from rstreams.runtime.queues.fsck import check_log

    root = job_root(args.data_dir, args.job, topic=args.name)
    checks = check_log(JobLayout.at(root).log, [args.name] if args.name else None)
    damaged = 0
    for qc in checks:
        for f in qc.findings:
            print(f)
            damaged += f.fatal
        if args.verbose and qc.queue >= 0:
            state = "ok" if qc.ok else "DAMAGED"
            print(
                f"{qc.topic}[{qc.queue}]: {state}: offsets {qc.start}..{qc.end}, "
                f"{qc.records} records in {qc.frames} frames, {qc.segments} segments",
                file=sys.stderr,
            )
    queues = sum(qc.queue >= 0 for qc in checks)
    if damaged:
        first = next(f for qc in checks for f in qc.findings if f.fatal)
        hint = ""
        if first.offset is not None and first.queue is not None:
            hint = (
                f"; cut the damage with `rstreams topics repair {first.topic} --queue "
                f"{first.queue} --truncate-at {first.offset} --data-dir {args.data_dir} "
                f"--job {root.name}`"
            )
        print(
            f"rstreams: {damaged} damaged place(s) in {queues} queues of job {root.name!r}"
            f"{hint}, then rebuild the job with `rstreams run ... --fresh` "
            "(docs/state.md#recovering-from-damage)",
            file=sys.stderr,
        )
        return 1
    if not args.quiet:
        print(f"{queues} queues checked: no damage", file=sys.stderr)
    return 0


def repair(args: argparse.Namespace) -> int:
    """``topics repair``: cut one queue at ``--truncate-at``, under the job's lock."""
    from rstreams.runtime.queues.fsck import repair_queue
    from rstreams.runtime.queues.joblock import JobLock

    if not args.name or args.queue is None or args.truncate_at is None:
        raise ConfigError("topics repair needs TOPIC, --queue Q and --truncate-at OFFSET")
    root = job_root(args.data_dir, args.job, topic=args.name)
    lock = JobLock(root.parent, root.name).acquire()  # never under a running job
    try:
        r = repair_queue(JobLayout.at(root).log, args.name, args.queue, args.truncate_at)
    finally:
        lock.release()
    if not (r.removed_records or r.removed_bytes):
        print(f"{r.topic}[{r.queue}]: nothing at or after offset {r.cut_at}; nothing cut")
        return 0
    print(
        f"{r.topic}[{r.queue}]: cut at offset {r.cut_at}: {r.removed_records} offsets, "
        f"{r.removed_bytes} bytes and {r.removed_segments} later segments removed"
    )
    for group, offset in r.groups:
        print(
            f"  group {group!r} had committed offset {offset}: lowered to {r.cut_at} "
            f"(it had consumed records that are gone)"
        )
    for store in r.stores:
        print(f"  state store {store} was built from removed changelog records")
    if r.job_marked:
        print(
            f"job {r.job_marked!r} must be rebuilt from its input: its state and outputs "
            f"include the removed records. Its next run refuses to start without --fresh "
            f"(rstreams run PIPELINE.py --input ... --data-dir {args.data_dir} --fresh)"
        )
    return 0
