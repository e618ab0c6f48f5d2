"""Run a topology over files, from Python or the CLI.

    >>> import os, tempfile
    >>> from rstreams import StreamBuilder, run
    >>> b = StreamBuilder("wc")
    >>> b.source("lines").flatMap(str.split).keyBy(lambda w: w).count().sink("counts")
    >>> path = os.path.join(tempfile.mkdtemp(), "in.txt")
    >>> _ = open(path, "w").write("a b\\na\\n")
    >>> result = run(b.build(), inputs={"lines": path})
    >>> result.tables["counts"]
    {'a': 2, 'b': 1}

The in-process runtime keeps queues and state in memory and processes the input in
chunks: each chunk runs through every sub-topology (shuffles included) and is committed
before the next is read, and consumed records are dropped, so memory is bounded by the
state size, not the input size. Aggregation updates are coalesced per commit (the last
value per key of a chunk is emitted), which is what a final table needs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

import attrs

from rstreams.errors import ConfigError, UnsupportedOperation
from rstreams.planner.topology import Topology
from rstreams.runtime.engine.context import EngineConfig
from rstreams.runtime.engine.local import LocalEngine, wall_clock_ms
from rstreams.runtime.gctune import tuned
from rstreams.runtime.queues.base import RecordColumns
from rstreams.serde import _json_default, json_texts

__all__ = ["Progress", "RunResult", "run"]

BACKENDS = ("embedded", "spark")


@attrs.frozen
class Progress:
    """A snapshot passed to the ``progress`` callback of :func:`run`."""

    records_in: int
    records_out: int
    bytes_read: int
    bytes_total: int | None
    elapsed: float
    #: What is running, when the backend says more than counts (e.g. a Spark stage).
    detail: str = ""
    #: Records read but not yet committed (durable runtime only).
    lag: int | None = None
    #: (changelog offsets replayed, offsets to replay) of the tasks restoring their
    #: state now (durable runtime only).
    restoring: tuple[int, int] | None = None


@attrs.frozen
class RunResult:
    """What a bounded run produced.

    ``tables`` maps each sink topic to its final table (last value per key, keys in
    order of first appearance); ``records_in`` counts input lines, ``records_out``
    records written to sink topics.
    """

    tables: dict[str, dict[Any, Any]]
    records_in: int
    records_out: int
    elapsed: float
    metrics: dict[str, int]


def line_chunks(
    f: BinaryIO, chunk_lines: int, *, last_partial: bool = True, block: int = 1 << 20
) -> Iterator[tuple[list[bytes], int]]:
    """Chunks of ``chunk_lines`` lines (without their line ends: ``\n`` and any ``\r``
    before it) and the bytes consumed so far.

    The file is read in large blocks and split in C, not a line at a time. A last line
    without a newline is a chunk of its own, kept as it is, when ``last_partial``
    (a finished file); otherwise it is left unread (a file still being written).
    """
    consumed = 0
    rest = b""
    pending: list[bytes] = []
    cr = False  # seen a \r: strip it from line ends

    def take(n: int) -> tuple[list[bytes], int]:
        chunk = pending[:n]
        del pending[:n]
        size = sum(map(len, chunk)) + len(chunk)  # the lines and their newlines
        if cr:
            chunk = [line.rstrip(b"\r") for line in chunk]
        return chunk, size

    while data := f.read(block):
        if rest:
            data = rest + data
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data
            continue
        rest = data[cut + 1 :]
        body = data[:cut]
        cr = cr or b"\r" in body
        pending.extend(body.split(b"\n"))
        while len(pending) >= chunk_lines:
            chunk, size = take(chunk_lines)
            consumed += size
            yield chunk, consumed
    if pending:
        chunk, size = take(len(pending))
        consumed += size
        yield chunk, consumed
    if rest and last_partial:
        consumed += len(rest)
        yield [rest], consumed


def _open(path: str) -> tuple[BinaryIO, int | None]:
    if path == "-":
        return sys.stdin.buffer, None
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"input file {path!r} does not exist")
    if p.is_dir():
        raise ConfigError(f"input {path!r} is a directory; give a file (one record per line)")
    try:
        f = p.open("rb")
    except OSError as e:
        raise ConfigError(f"can not read input file {path!r}: {e.strerror}") from None
    return f, p.stat().st_size


def check_inputs(topology: Topology, inputs: dict[str, str]) -> None:
    """Every source topic bound to an input, and nothing else bound."""
    missing = [t for t in topology.source_topics if t not in inputs]
    unknown = [t for t in inputs if t not in topology.source_topics]
    if unknown:
        raise ConfigError(
            f"topic(s) {unknown} are not sources of {topology.job_id!r}; "
            f"its sources are {topology.source_topics}"
        )
    if missing:
        raise ConfigError(f"no input bound to source topic(s) {missing}; bind each to a file")


#: Seconds between commits of an in-process run.
COMMIT_INTERVAL = 1.0


def run(
    topology: Topology,
    inputs: dict[str, str],
    *,
    backend: str = "embedded",
    on_error: str = "fail",
    chunk_lines: int = 20_000,
    progress: Callable[[Progress], None] | None = None,
    workers: int | None = None,
    data_dir: str | None = None,
    pipeline: str | None = None,
    fresh: bool = False,
    follow: bool = False,
    guarantee: str = "exactly-once",
    state: str = "rocksdb",
    worker_args: list[str] | None = None,
    max_restarts: int = 5,
    master: str | None = None,
    spark: Any = None,
    **spark_options: Any,
) -> RunResult:
    """Run ``topology`` over bounded input and return the final table of every sink.

    Args:
        topology: from ``StreamBuilder.build()``.
        inputs: source topic -> path of a text file (one record per line; ``-`` is
            stdin). Every source topic of the topology needs one.
        backend: ``"embedded"`` or ``"spark"``: the same pipeline on Apache Spark (see
            :func:`rstreams.runtime.spark.run_spark`; inputs may then also be
            directories or globs).
        on_error: ``"fail"``, ``"skip"`` or ``"dead-letter"`` (see EngineConfig).
        chunk_lines: lines read per source before each run-and-commit round.
        progress: called after every chunk with a :class:`Progress`.
        workers: worker processes of the durable runtime (default 1).
        data_dir: directory of the durable runtime's log, offsets and state. Without
            it (and with one worker) everything runs in this process on memory queues:
            fastest, but nothing survives the run.
        pipeline: path of the pipeline file (the durable runtime's worker processes
            load the topology from it); required with ``data_dir`` or ``workers > 1``.
        fresh: with ``data_dir``, forget what earlier runs of this job left there.
        guarantee: durable runtime: ``"exactly-once"`` (default; transactional commits) or
            ``"at-least-once"`` (faster; a crash may count some input twice).
        state: durable runtime: ``"rocksdb"`` (default) or ``"memory"`` state stores.
        max_restarts: durable runtime: restarts of dead workers in a row without progress
            (no commit) before the run gives up (0: never restart).
        follow: with ``data_dir``, keep reading lines appended to the input files until
            interrupted (Ctrl-C or SIGTERM), then return the tables as they are.
        master: Spark master URL (``local[*]`` by default); Spark only.
        spark: a SparkSession to run on; Spark only.
        spark_options: more options of ``run_spark`` (``outputs``, ``streaming``,
            ``checkpoint``, ``trigger_once``, ``collect``, ``conf``); Spark only.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend == "spark":
        from rstreams.runtime.spark import run_spark

        return run_spark(
            topology,
            inputs,
            master=master,
            spark=spark,
            on_error=on_error,
            progress=progress,
            **spark_options,
        )
    if master is not None or spark is not None or spark_options:
        extra = sorted(spark_options) + ["master"] * (master is not None)
        raise UnsupportedOperation(
            f"option(s) {extra + ['spark'] * (spark is not None)} need backend='spark'"
        )
    check_inputs(topology, inputs)
    with tuned():
        return _run_embedded(
            topology, inputs, on_error=on_error, chunk_lines=chunk_lines, progress=progress,
            workers=workers, data_dir=data_dir, pipeline=pipeline, fresh=fresh,
            follow=follow, guarantee=guarantee, state=state, worker_args=worker_args,
            max_restarts=max_restarts,
        )  # fmt: skip


def _run_embedded(
    topology: Topology,
    inputs: dict[str, str],
    *,
    on_error: str,
    chunk_lines: int,
    progress: Callable[[Progress], None] | None,
    workers: int | None,
    data_dir: str | None,
    pipeline: str | None,
    fresh: bool,
    follow: bool,
    guarantee: str,
    state: str,
    worker_args: list[str] | None,
    max_restarts: int = 5,
) -> RunResult:
    if chunk_lines < 1:
        raise ConfigError(f"chunk_lines must be >= 1; got {chunk_lines}")
    if follow and data_dir is None:
        raise ConfigError("follow=True needs the durable runtime: give data_dir")
    if data_dir is not None or (workers or 1) > 1:
        if pipeline is None:
            raise ConfigError(
                "the durable runtime starts worker processes that load the pipeline from its "
                "file: pass pipeline='path/to/pipeline.py' (or run without data_dir/workers)"
            )
        from rstreams.runtime.engine.supervisor import run_durable

        return run_durable(
            pipeline,
            topology,
            inputs,
            data_dir=data_dir or ".rstreams",
            workers=workers or 1,
            on_error=on_error,
            fresh=fresh,
            progress=progress,
            follow=follow,
            guarantee=guarantee,
            state=state,
            worker_args=worker_args,
            max_restarts=max_restarts,
        )

    opened = {topic: _open(path) for topic, path in inputs.items()}
    total_bytes: int | None = sum(size or 0 for _, size in opened.values())
    if any(size is None for _, size in opened.values()):
        total_bytes = None
    engine = LocalEngine(
        topology,
        config=EngineConfig(on_error=on_error, coalesce=True, batch_size=chunk_lines),
    )
    producer = engine.producer
    sinks = topology.sink_topics
    tables: dict[str, dict[Any, Any]] = {t: {} for t in sinks}
    read_pos = {(t, q): 0 for t in sinks for q in range(engine.queue_counts[t])}
    records_in = records_out = 0
    start = time.monotonic()
    iters = {t: line_chunks(f, chunk_lines) for t, (f, _) in opened.items()}
    consumed: dict[str, int] = dict.fromkeys(iters, 0)
    rounds = 0
    next_commit = start + COMMIT_INTERVAL
    try:
        while iters:
            for topic in list(iters):
                nxt = next(iters[topic], None)
                if nxt is None:
                    del iters[topic]
                    continue
                lines, consumed[topic] = nxt
                ts = wall_clock_ms()
                q = rounds % engine.queue_counts[topic]
                producer.send_many(topic, q, [(ts, None, line, ()) for line in lines])
                records_in += len(lines)
            rounds += 1
            producer.flush()
            # Commit about once a second, as workers do: updates to the same key in
            # between are combined and coalesced instead of written and read back.
            commit = time.monotonic() >= next_commit
            engine.run_until_idle(commit=commit)
            if commit:
                records_out += _collect(engine, sinks, tables, read_pos)
                engine.purge_consumed()
                next_commit = time.monotonic() + COMMIT_INTERVAL
            if progress is not None:
                progress(
                    Progress(
                        records_in,
                        records_out,
                        sum(consumed.values()),
                        total_bytes,
                        time.monotonic() - start,
                    )
                )
        engine.end_of_input()
        engine.close()
        records_out += _collect(engine, sinks, tables, read_pos)
    finally:
        for f, _ in opened.values():
            if f is not sys.stdin.buffer:
                f.close()
    return RunResult(tables, records_in, records_out, time.monotonic() - start, engine.metrics())


def fold_records(table: dict[Any, Any], records: RecordColumns, spec: Any) -> None:
    """Fold sink records (deserialized with the sink topic's serdes) into a final table:
    the last value per key."""
    if not len(records):
        return
    # Only each key's last record counts: pick those on the raw bytes (in log order, so
    # that keys written as different bytes still fold in order), then decode columns.
    raw_keys, raw_values = records.keys, records.values
    last = sorted(dict(zip(raw_keys, range(len(raw_keys)))).values())
    keys = _decode_column(spec.key_serde, [raw_keys[i] for i in last])
    values = _decode_column(spec.value_serde, [raw_values[i] for i in last])
    try:
        table.update(zip(keys, values))
    except TypeError:  # unhashable keys (lists, dicts): make them hashable
        for k, v in zip(keys, values):
            table[_hashable(k)] = v


def _decode_column(serde: Any, column: list[bytes | None]) -> list[Any]:
    if None in column:
        de = serde.deserialize
        return [None if b is None else de(b) for b in column]
    return serde.deserialize_many(column)


def _collect(
    engine: LocalEngine,
    sinks: list[str],
    tables: dict[str, dict[Any, Any]],
    read_pos: dict[tuple[str, int], int],
) -> int:
    """Fold new sink records into the final tables; drop them (and changelogs) after."""
    n = 0
    broker = engine.broker
    for topic in sinks:
        spec = engine.topology.topics[topic]
        for q in range(engine.queue_counts[topic]):
            records = broker.read_columns(topic, q, read_pos[(topic, q)])
            fold_records(tables[topic], records, spec)
            n += len(records)
            read_pos[(topic, q)] += len(records)
            broker.purge(topic, q, read_pos[(topic, q)])
    # Nothing restores from changelogs in memory; keep them from growing.
    for spec in engine.topology.topics.values():
        if spec.role == "changelog":
            for q in range(engine.queue_counts[spec.name]):
                broker.purge(spec.name, q, broker.end_offset(spec.name, q))
    return n


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in key.items()))
    return key


def _table_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=_json_default)


def _rows(table: dict[Any, Any]) -> list[str]:
    """The JSON lines of a final table (windowed keys as {"@windowed": [...]})."""
    keys = json_texts(list(table), _table_json)
    values = json_texts(list(table.values()), _table_json)
    return [f'{{"key": {k}, "value": {v}}}\n' for k, v in zip(keys, values)]


def write_table(table: dict[Any, Any], path: str | IO[str]) -> None:
    """Write a final table as JSON lines ``{"key": ..., "value": ...}``: to a file
    atomically (a temp file renamed into place), or to an open text stream."""

    if not isinstance(path, str):
        path.writelines(_rows(table))
        path.flush()
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(_rows(table))
    tmp.replace(target)
