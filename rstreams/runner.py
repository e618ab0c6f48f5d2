"""Run a topology over files, from Python or the CLI.

    >>> import os, tempfile
    >>> from rstreams import StreamBuilder, run
    >>> b = StreamBuilder("wc")
    >>> b.source("lines").flatMap(str.split).keyBy(lambda w: w).count().sink("counts")
    >>> path = os.path.join(tempfile.mkdtemp(), "in.txt")
    >>> _ = open(path, "w").write("a b\\na\\n")
    >>> result = run(b.build(), inputs={"lines": path})
    >>> sorted(result.tables["counts"].items())  # a table's key order is not specified
    [('a', 2), ('b', 1)]

The in-process runtime keeps queues and state in memory and processes the input in
chunks: each chunk runs through every sub-topology (shuffles included) and is committed
before the next is read, and consumed records are dropped, so memory is bounded by the
state size, not the input size. Aggregation updates are coalesced per commit (the last
value per key of a chunk is emitted), which is what a final table needs.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import attrs

from rstreams.config import RunConfig, SparkConfig, dead_letter_topic
from rstreams.errors import ConfigError, UnsupportedOperation
from rstreams.planner.topology import Topology
from rstreams.runtime.engine.coordination.local import LocalEngine
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.operators.record import wall_clock_ms
from rstreams.runtime.gctune import tuned
from rstreams.runtime.inputs import check_input_file, ingest_mark, open_input

# Shared with the Spark backend, which must not import this module: they live below both
# backends and are re-exported here under their old names.
from rstreams.runtime.inputs import check_inputs as check_inputs
from rstreams.runtime.inputs import line_chunks as line_chunks
from rstreams.runtime.positions import line_headers, position_bases
from rstreams.runtime.queues.base import Headers
from rstreams.runtime.results import Progress as Progress
from rstreams.runtime.results import RunResult as RunResult
from rstreams.runtime.results import fold_records as fold_records
from rstreams.runtime.results import write_table as write_table

__all__ = ["Progress", "RunResult", "run"]


def run(
    topology: Topology,
    inputs: dict[str, str],
    config: RunConfig | None = None,
    *,
    progress: Callable[[Progress], None] | None = None,
    spark: Any = None,
    **options: Any,
) -> RunResult:
    """Run ``topology`` over bounded input and return the final table of every sink.

    Args:
        topology: from ``StreamBuilder.build()``.
        inputs: source topic -> path of a text file (one record per line; ``-`` is
            stdin). Every source topic of the topology needs one.
        config: the run's options (:class:`~rstreams.config.RunConfig`); its defaults
            are the command line's.
        progress: called after every chunk with a :class:`Progress`.
        spark: a SparkSession to run on (``backend="spark"`` only).
        options: options of :class:`~rstreams.config.RunConfig` given as keywords
            (they override ``config``), e.g. ``workers=2, data_dir="jobs",
            pipeline="wc.py"``; with ``backend="spark"``, those of its
            :class:`~rstreams.config.SparkConfig` section (``streaming``,
            ``checkpoint``, ``trigger_once``, ``collect``, ``conf``...) the same way,
            and run_spark's ``outputs`` and ``redis``.

    Without ``data_dir`` (and with at most one worker) everything runs in this process
    on memory queues: fastest, but nothing survives the run. With ``data_dir`` or
    ``workers > 1`` it runs on the durable runtime: worker processes that load the
    pipeline from ``pipeline`` (its file), a log on disk, RocksDB state, exactly-once
    commits (see :class:`~rstreams.config.RunConfig` for every option).
    """
    config, spark_options = _with_options(config, options)
    if config.backend == "spark":
        from rstreams.runtime.spark import run_spark

        return run_spark(
            topology, inputs, spark=spark, progress=progress, config=config, **spark_options
        )
    given = (
        attrs.asdict(config.on_spark, recurse=False).items() - attrs.asdict(SparkConfig()).items()
    )
    extra = sorted(spark_options) + [name for name, _ in given]
    extra += ["master"] * (config.master is not None) + ["spark"] * (spark is not None)
    if extra:
        raise UnsupportedOperation(f"option(s) {sorted(extra)} need backend='spark'")
    if not config.join:  # (a joining run reads no input: the run it joins does)
        check_inputs(topology, inputs)
    with tuned():
        return _run_embedded(topology, inputs, config, progress)


def _with_options(
    config: RunConfig | None, options: dict[str, Any]
) -> tuple[RunConfig, dict[str, Any]]:
    """``config`` with the options given as keywords (the run's, and its Spark
    section's), and the keywords that are neither (run_spark's own)."""
    fields, spark_fields = set(attrs.fields_dict(RunConfig)), set(attrs.fields_dict(SparkConfig))
    config = RunConfig.of(config, **{k: v for k, v in options.items() if k in fields})
    spark = {k: v for k, v in options.items() if k in spark_fields}
    if spark:
        config = config.replace(on_spark=attrs.evolve(config.on_spark, **spark))
    return config, {k: v for k, v in options.items() if k not in fields | spark_fields}


def _line_chunks(
    opened: dict[str, tuple[Any, int | None]], inputs: dict[str, str], config: RunConfig
) -> dict[str, Iterator[tuple[list[bytes], int]]]:
    """Per source topic, the chunks of lines of its open input."""
    return {
        t: line_chunks(f, config.chunk_lines, max_line=config.max_line_bytes, name=inputs[t])
        for t, (f, _) in opened.items()
    }


def _run_embedded(
    topology: Topology,
    inputs: dict[str, str],
    config: RunConfig,
    progress: Callable[[Progress], None] | None,
) -> RunResult:
    if config.follow and config.data_dir is None:
        raise ConfigError("follow=True needs the durable runtime: give data_dir")
    if config.data_dir is not None or config.broker or (config.workers or 1) > 1:
        return _run_durable(topology, inputs, config, progress)
    if topology.external_sources or topology.external_sinks:
        from rstreams.runtime.engine.io.external import check_external_broker

        check_external_broker(topology, None)  # (raises: they need --broker redis://)
    return _run_in_process(topology, inputs, config, progress)


def _run_in_process(
    topology: Topology,
    inputs: dict[str, str],
    config: RunConfig,
    progress: Callable[[Progress], None] | None,
) -> RunResult:
    """In this process on memory queues: each round sends a chunk of every input through
    the engine (see the module's docs); the tables fold what every commit wrote."""
    on_error, chunk_lines = config.on_error, config.chunk_lines
    opened = {topic: open_input(path) for topic, path in inputs.items()}
    sizes = [size for _, size in opened.values()]
    total_bytes = None if None in sizes else sum(size or 0 for size in sizes)
    engine = LocalEngine(
        topology,
        config=EngineConfig(on_error=on_error, coalesce=True, batch_size=chunk_lines),
    )
    sinks = topology.sink_topics
    tables: dict[str, dict[Any, Any]] = {t: {} for t in sinks}
    read_pos = {(t, q): 0 for t in sinks for q in range(engine.queue_counts[t])}
    records_in = records_out = 0
    # Nothing of an in-process run outlives it: its dead letters go back to the caller.
    dead_letters: list[dict[str, Any]] = []
    start = time.monotonic()
    iters = _line_chunks(opened, inputs, config)
    consumed: dict[str, int] = dict.fromkeys(iters, 0)
    columns_of = _ChunkColumns(topology, inputs)
    rounds = 0
    every = config.in_process_commit_interval
    next_commit = start + every
    try:
        while iters:
            records_in += _send_round(iters, consumed, columns_of, engine, rounds)
            rounds += 1
            engine.producer.flush()
            # Commit every `every` seconds: updates to the same key in between
            # are combined and coalesced instead of written and read back.
            commit = time.monotonic() >= next_commit
            engine.run_until_idle(commit=commit)
            if commit:
                next_commit = time.monotonic() + every
            # What any commit wrote (relieve_memory's too) goes to the tables now, and
            # the input read to its end is dropped: nothing reads either again.
            records_out += _collect(engine, sinks, tables, read_pos, dead_letters)
            engine.purge_consumed()
            if progress is not None:
                read, elapsed = sum(consumed.values()), time.monotonic() - start
                progress(Progress(records_in, records_out, read, total_bytes, elapsed))
        engine.end_of_input()
        engine.close()
        records_out += _collect(engine, sinks, tables, read_pos, dead_letters)
    finally:
        for f, _ in opened.values():
            if f is not sys.stdin.buffer:
                f.close()
    return RunResult(
        tables,
        records_in,
        records_out,
        time.monotonic() - start,
        engine.metrics(),
        dead_letters=dead_letters,
    )


def _send_round(
    iters: dict[str, Iterator[tuple[list[bytes], int]]],
    consumed: dict[str, int],
    columns_of: _ChunkColumns,
    engine: LocalEngine,
    rounds: int,
) -> int:
    """Send the next chunk of every input not read to its end (dropped from ``iters``
    once it is) to queue ``rounds`` of its topic, round robin; the records sent."""
    sent = 0
    for topic in list(iters):
        nxt = next(iters[topic], None)
        if nxt is None:
            del iters[topic]
            continue
        lines, consumed[topic] = nxt
        columns = columns_of(topic, lines, consumed[topic])
        engine.producer.send_columns(topic, rounds % engine.queue_counts[topic], *columns)
        sent += len(lines)
    return sent


class _ChunkColumns:
    """The columns of each input's chunks (:func:`_chunk_columns`), with each line's
    position where the topology has a temporal join (``rstreams.runtime.positions``)."""

    def __init__(self, topology: Topology, inputs: dict[str, str]) -> None:
        self.inputs = inputs
        self.bases = position_bases(topology)
        self.start = dict.fromkeys(inputs, 0)  # where each input's next chunk starts

    def __call__(
        self, topic: str, lines: list[bytes], consumed: int
    ) -> tuple[list[int], list[bytes | None], list[bytes | None], list[Headers]]:
        start, self.start[topic] = self.start[topic], consumed
        return _chunk_columns(lines, self.inputs[topic], consumed, self.bases.get(topic), start)


def _chunk_columns(
    lines: list[bytes], path: str, consumed: int, base: int | None = None, start: int = 0
) -> tuple[list[int], list[bytes | None], list[bytes | None], list[Headers]]:
    """A chunk of ``path``'s lines as the columns of its records (timestamps, keys,
    values, headers); the last one is marked with what was read of the file
    (``consumed`` bytes), as the durable ingest does (see InputLocator). Columns, not a
    tuple per line: the lines are the value column as they are."""
    n = len(lines)
    mark = ingest_mark(path, consumed) if path != "-" else ()
    if base is not None:  # each line's position (a temporal join's tie rule)
        headers = line_headers(base, start, lines, mark)
    else:
        headers = [()] * n
        if mark:
            headers[-1] = mark
    return [wall_clock_ms()] * n, [None] * n, cast("list[bytes | None]", lines), headers


def _run_durable(
    topology: Topology,
    inputs: dict[str, str],
    config: RunConfig,
    progress: Callable[[Progress], None] | None,
) -> RunResult:
    """On worker processes (the durable runtime), which load the pipeline's file."""
    if config.pipeline is None:
        raise ConfigError(
            "the durable runtime starts worker processes that load the pipeline from its "
            "file: pass pipeline='path/to/pipeline.py' (or run without data_dir/workers)"
        )
    from rstreams.runtime.engine.coordination.supervisor import run_durable

    for path in inputs.values():
        if path != "-":  # (the supervisor says that stdin needs --in-memory)
            check_input_file(path)
    result: RunResult = run_durable(
        config.pipeline,
        topology,
        inputs,
        config.replace(data_dir=config.durable_data_dir),
        progress=progress,
    )
    return result


def _collect(
    engine: LocalEngine,
    sinks: list[str],
    tables: dict[str, dict[Any, Any]],
    read_pos: dict[tuple[str, int], int],
    dead_letters: list[dict[str, Any]],
) -> int:
    """Fold new sink records into the final tables and move new dead letters to
    ``dead_letters``; drop them (and changelogs) after."""
    n = 0
    broker = engine.broker
    dead = dead_letter_topic(engine.topology.job_id)
    if broker.queue_count(dead) is not None:
        end = broker.end_offset(dead, 0)
        pos = broker.start_offset(dead, 0)
        while pos < end:
            batch = broker.read(dead, 0, pos, 10_000)
            dead_letters.extend(json.loads(r.value or b"null") for r in batch)
            pos = batch[-1].offset + 1
        broker.purge(dead, 0, end)
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
