"""Commands that look at and feed the embedded runtime's log: topics, produce, consume,
offsets, group and state. They work on the log of one job: ``DATA_DIR/JOB``, or with
``--broker URL`` the job's keys in Redis (:mod:`rstreams.brokeropts`). ``--job`` may be
left out when the data directory (or database) holds a single job, or when only one of
its jobs has what the command names (the topic, group or store)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from rstreams.brokeropts import (
    JobAccess,
    add_broker_options,
    broker_errors,
    redis_access,
    refuse_broker,
    target_of,
)
from rstreams.config import DEFAULT_DATA_DIR
from rstreams.errors import ConfigError, SerdeError
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.layout import JobLayout, job_id_arg
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.queues.mapper import ModuloQueueMapper
from rstreams.serde import SERDES, Serde
from rstreams.windowed import Windowed, result_row


def job_root(
    data_dir: str,
    job: str | None,
    *,
    topic: str | None = None,
    group: str | None = None,
    store: str | None = None,
) -> Path:
    """``DATA_DIR/JOB`` of ``job``; without one, of the only job in ``data_dir``, or of
    the only job that has ``topic``, ``group`` or ``store`` (the thing the command
    names). Several candidates: an error that lists them."""
    base = Path(data_dir)
    if job:
        layout = JobLayout.of(data_dir, job)
        if not layout.log.is_dir():
            raise ConfigError(f"no job {job!r} in {data_dir} (no {layout.log})")
        return layout.root
    jobs = JobLayout.jobs(data_dir)
    if len(jobs) == 1:
        return base / jobs[0]
    if not jobs:
        raise ConfigError(f"no job has run in {data_dir!r}; run one or give --data-dir")
    what, has = _named_thing(topic, group, store)
    if has is None:
        raise ConfigError(
            f"{data_dir!r} holds several jobs ({', '.join(jobs)}); pick one with --job"
        )
    having = [j for j in jobs if has(base / j)]
    if len(having) == 1:
        return base / having[0]
    if not having:
        raise ConfigError(
            f"no job in {data_dir!r} has {what} (its jobs: {', '.join(jobs)}); pick one with --job"
        )
    raise ConfigError(
        f"several jobs in {data_dir!r} have {what}: {', '.join(having)}; pick one with --job"
    )


def _named_thing(
    topic: str | None, group: str | None, store: str | None
) -> tuple[str, Callable[[Path], bool] | None]:
    """What a command names, in words, and the test of whether a job's root has it."""
    from rstreams.runtime.queues.filelog import has_group, has_topic

    if topic is not None:
        return f"the topic {topic!r}", lambda root: has_topic(JobLayout.at(root).log, topic)
    if store is not None:
        from rstreams.state.inspect import changelog_of

        changelog = changelog_of(store)
        return f"the store {store!r}", lambda root: has_topic(JobLayout.at(root).log, changelog)
    if group is not None:

        def has(root: Path) -> bool:
            job = JobLayout.at(root)
            return has_group(job.log, group) or job.group(group).dir.is_dir()

        return f"the group {group!r}", has
    return "", None


def _access(
    args: argparse.Namespace,
    create: bool = False,
    topic: str | None = None,
    group: str | None = None,
    store: str | None = None,
) -> JobAccess:
    """The job the command works on: ``--job``, or the one found (see :func:`job_root`)."""
    if args.broker:
        access = redis_access(args, topic=topic, group=group, store=store)
    else:
        if create and args.job:
            root = JobLayout.of(args.data_dir, args.job).root
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = job_root(args.data_dir, args.job, topic=topic, group=group, store=store)
        access = JobAccess(str(root.parent), root.name)
    args.job = access.job  # the job found, for what the command reads next
    return access


def _broker(
    args: argparse.Namespace,
    create: bool = False,
    topic: str | None = None,
    group: str | None = None,
) -> Broker:
    return _access(args, create, topic, group).open_broker()


def _check_topic_name(topic: str | None) -> None:
    """Refuse a topic name the log can not keep as one directory of its own."""
    if topic is None:
        return
    if not topic or "/" in topic or "\\" in topic or ".." in topic or "\0" in topic:
        raise ConfigError(
            f"invalid topic name {topic!r}: a topic name must be non-empty and contain "
            "no '/', '\\', '..' or NUL"
        )


def _known(broker: Broker, topic: str) -> int:
    n = broker.queue_count(topic)
    if n is None:
        known = ", ".join(sorted(broker.topics())) or "none"
        raise ConfigError(f"topic {topic!r} does not exist (topics: {known})")
    return int(n)


def cmd_topics(args: argparse.Namespace) -> int:
    if args.action == "check":
        refuse_broker(
            args, "topics check", "it reads the file log's segment files; Redis keeps no such "
            "files (check the server's own persistence with redis-check-aof)",
        )  # fmt: skip
        return _check(args)
    if args.action == "repair":
        refuse_broker(
            args, "topics repair", "it cuts the file log's segment files; a Redis stream has "
            "none (rebuild the job with `rstreams run ... --fresh`)",
        )  # fmt: skip
        return _repair(args)
    if args.action in ("create", "describe"):
        _check_topic_name(args.name)
    broker = _broker(
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
            n = _known(broker, args.name)
            print(f"topic {args.name}: {n} queues")
            for q in range(n):
                start, end = broker.start_offset(args.name, q), broker.end_offset(args.name, q)
                print(f"  queue {q}: offsets {start}..{end} ({end - start} records)")
    finally:
        broker.close()
    return 0


def _check(args: argparse.Namespace) -> int:
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


def _repair(args: argparse.Namespace) -> int:
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


def cmd_produce(args: argparse.Namespace) -> int:
    _check_topic_name(args.topic)
    broker = _broker(args, create=True, topic=args.topic)
    try:
        if broker.queue_count(args.topic) is None:
            broker.create_topic(args.topic, args.queues)
        n = _known(broker, args.topic)
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


def _decode(b: bytes | None) -> str | None:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.hex()


def _topic_serdes(root: Path, topic: str) -> tuple[Serde | None, Serde | None]:
    """The key and value serdes that the job's last topology gave ``topic``, where they
    are built-in ones that give typed values (json, msgpack); None for the others and
    for topics the topology does not know (e.g. written by ``produce``)."""
    from rstreams.planner.diff import TopologyIdentity

    try:
        text = JobLayout.at(root).topology.read_text(encoding="utf-8")
        topics = TopologyIdentity.from_json(text).topics
    except (OSError, UnicodeDecodeError, ValueError):
        return None, None
    for t in topics:
        if t.name == topic:
            return _TYPED_SERDES.get(t.key_serde), _TYPED_SERDES.get(t.value_serde)
    return None, None


#: Serdes whose bytes ``consume --format json`` prints as the JSON values they hold.
_TYPED_SERDES = {name: SERDES[name] for name in ("json", "msgpack")}


def _typed(b: bytes | None, serde: Serde | None) -> Any:
    """A record's key or value for ``--format json``: what its serde reads (a JSON
    value, not a string holding JSON), else its text (or hex, when not UTF-8)."""
    if b is not None and serde is not None:
        try:
            return serde.deserialize(b)
        except SerdeError:
            pass
    return _decode(b)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Windowed):  # nested in a value: the flat shape of a key
        return obj.to_dict()
    if isinstance(obj, bytes):  # a msgpack bin
        return _decode(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _records(
    broker: Broker, topic: str, queue: int, start: int, limit: int | None
) -> Iterator[Any]:
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
    _check_topic_name(args.topic)
    if args.offset is not None and args.offset < 0:
        raise ConfigError(f"--offset must be >= 0; got {args.offset}")
    broker = _broker(args, topic=args.topic)
    try:
        n = _known(broker, args.topic)
        kserde, vserde = _topic_serdes(JobLayout.of(args.data_dir, args.job).root, args.topic)
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
                    key, value = _typed(r.key, kserde), _typed(r.value, vserde)
                    row = {"queue": q, "offset": r.offset, "timestamp": r.timestamp,
                           **result_row(key, value)}  # fmt: skip
                    print(json.dumps(row, ensure_ascii=False, default=_json_default))
                else:
                    key = _decode(r.key)
                    val = _decode(r.value) or ""
                    print(val if key is None else f"{key}\t{val}")
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


def cmd_offsets(args: argparse.Namespace) -> int:
    broker = _broker(args, group=args.group)
    try:
        offsets = broker.group_offsets(args.group)
        if not offsets:
            raise ConfigError(f"group {args.group!r} has committed no offsets")
        _print_lag(broker, offsets)
    finally:
        broker.close()
    return 0


def lag_rows(
    broker: Broker, offsets: dict[tuple[str, int], int]
) -> list[tuple[str, int, int, int, int]]:
    """(topic, queue, committed, end, lag) of each topic queue of ``offsets`` (committed
    offsets), sorted; the lag is what the log holds past the committed offset."""
    rows = []
    for (topic, q), off in sorted(offsets.items()):
        end = broker.end_offset(topic, q)
        rows.append((topic, q, off, end, end - off))
    return rows


def _print_lag(broker: Broker, offsets: dict[tuple[str, int], int], indent: str = "") -> None:
    """A table of committed offset, end and lag per topic queue."""
    print(f"{indent}topic\tqueue\tcommitted\tend\tlag")
    for topic, q, off, end, lag in lag_rows(broker, offsets):
        print(f"{indent}{topic}\t{q}\t{off}\t{end}\t{lag}")


def cmd_group(args: argparse.Namespace) -> int:
    access = _access(args, group=args.group)
    job = access.job
    group = args.group or job
    broker = access.open_broker()
    try:
        offsets = broker.group_offsets(group)
    finally:
        broker.close()
    m = access.membership(group, "rstreams-cli")  # (None: no such group's directory)
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
        broker = access.open_broker()
        try:
            _print_lag(broker, offsets, indent="  ")
        finally:
            broker.close()
    access.close()
    return 0


def _key_arg(text: str) -> Any:
    """A key typed on the command line: JSON if it parses (42, "x", [1, 2]), else text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def cmd_state(args: argparse.Namespace) -> int:
    access = _access(args, store=args.store)
    # (the file log: inspect opens it; Redis: the job's changelogs in the broker)
    broker = access.open_broker() if access.redis else None
    try:
        return _state(args, access.data_dir, access.job, broker)
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


def _on_data_dir(
    cmd: Callable[[argparse.Namespace], int],
    read_only: Callable[[argparse.Namespace], bool] = lambda args: False,
    creates: Callable[[argparse.Namespace], bool] = lambda args: False,
) -> Callable[[argparse.Namespace], int]:
    """``cmd``, refusing first a --data-dir that is a file, is under one or is not
    writable: opening the log takes lock files in it, and the bare OSError of that says
    nothing of --data-dir. Not checked for writing: a command that only reads
    (``read_only(args)``), and one that creates nothing (``creates(args)``) in a data
    directory that does not exist (its own error, "no job has run", says more)."""
    from rstreams.runtime.results import check_data_dir

    def checked(args: argparse.Namespace) -> int:
        target = target_of(args)
        if target is not None:  # (nothing of the job in the data directory)
            with broker_errors(target):
                return cmd(args)
        write = not read_only(args) and (creates(args) or Path(args.data_dir).exists())
        check_data_dir(args.data_dir, write=write)
        return cmd(args)

    return checked


def add_parsers(sub: Any, common: Any) -> None:
    """The log commands' parsers: topics, produce, consume, offsets, state and group."""

    def base(p: argparse.ArgumentParser) -> None:
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

    _add_topics_parser(sub, base)

    p = sub.add_parser("produce", help="append stdin lines to a topic (one record per line)")
    p.add_argument("topic", help="the topic to append to (created if new)")
    p.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE")
    p.add_argument("--queues", type=int, default=1, help="queues if the topic is new")
    base(p)
    p.set_defaults(func=_on_data_dir(cmd_produce, creates=lambda args: True))

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
    p.set_defaults(func=_on_data_dir(cmd_consume))

    p = sub.add_parser("offsets", help="committed offsets and lag of a consumer group")
    p.add_argument("group", help="the consumer group (a job's group is named after the job)")
    base(p)
    p.set_defaults(func=_on_data_dir(cmd_offsets))

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
    p.set_defaults(func=_on_data_dir(cmd_state, read_only=lambda args: True))

    p = sub.add_parser("group", help="members and tasks of a job's consumer group")
    p.add_argument("action", choices=("describe",), help="show live members and task locks")
    p.add_argument("group", nargs="?", help="default: the job id")
    base(p)
    p.set_defaults(func=_on_data_dir(cmd_group))


def _add_topics_parser(sub: Any, base: Callable[[argparse.ArgumentParser], None]) -> None:
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
        func=_on_data_dir(
            cmd_topics,
            read_only=lambda args: args.action == "check",
            creates=lambda args: args.action == "create",
        )
    )
