"""The ``rstreams run`` command: its options, declared once (here the command's own, the
run's in the tree of :class:`~rstreams.config.RunConfig`: the run's, Spark's, the
workers'), its checks, and the run itself. Its arguments are generated from the
declarations and its values become the tree with :func:`~rstreams.options.from_args`:
no option is listed or copied here by hand."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rstreams.config import RunConfig, dead_letter_topic
from rstreams.errors import ConfigError, UnsupportedOperation
from rstreams.loader import load_topology
from rstreams.options import add_argument, at_least, check_args, flagged, from_args, option, tree

if TYPE_CHECKING:
    from rstreams.live import LiveRunView
    from rstreams.planner.topology import Topology
    from rstreams.progress import RunProgress
    from rstreams.runtime.metrics import MetricsServer
    from rstreams.runtime.results import RunResult


@attrs.frozen(kw_only=True)
class RunCommandOptions:
    """The options of ``rstreams run`` that are not the run's: what to read, write and
    print."""

    input: str | None = option(
        None,
        flag="--input",
        metavar="PATH",
        help="text file for the only source topic (- for stdin, with --in-memory)",
    )
    bind: tuple[str, ...] = option(
        (),
        flag="--bind",
        metavar="TOPIC=PATH",
        help="bind a source topic to a text file (repeatable)",
    )
    output: str | None = option(
        None,
        flag="--output",
        metavar="PATH",
        help="write the final table of the only sink topic as JSON lines "
        '{"key": ..., "value": ...} (- for stdout); a windowed result as '
        '{"key": ..., "window": {"start": ..., "end": ...}, ["closed": ...,] "value": ...}',
    )
    in_memory: bool = option(
        False,
        flag="--in-memory",
        help="run in this process on memory queues (fast; nothing is kept or resumable)",
    )
    dead_letters: str | None = option(
        None,
        flag="--dead-letters",
        metavar="PATH",
        help="with --on-error dead-letter on --in-memory or --backend spark: write the "
        "records that failed (step, topic, offset, key, value, error) as JSON lines to PATH",
    )
    top: int = option(
        20,
        flag="--top",
        metavar="N",
        help="rows of each table to print without --output (default: %(default)s)",
        check=at_least(0),
    )


#: The options of ``rstreams run``, each with the class that declares it, in the order
#: its help shows them: the command's own, then every flagged option of the run's tree
#: (the run's, then its sections': Spark's, the workers'). Nothing is listed by hand: an
#: option declared with a flag anywhere in the tree is an option of the command.
RUN_OPTIONS: tuple[tuple[type, str], ...] = tuple(
    (cls, name) for cls in (RunCommandOptions, *tree(RunConfig)) for name in flagged(cls)
)


def add_run_parser(
    sub: Any, common: Callable[[argparse.ArgumentParser], None], pipeline_help: str
) -> None:
    """The ``run`` command's parser, generated from the declarations of its options."""
    run = sub.add_parser(
        "run",
        help="run a pipeline over input files",
        description="Run a pipeline over bounded input and print or write its final table.",
    )
    run.add_argument("pipeline", metavar="PIPELINE.py", help=pipeline_help)
    for cls, name in RUN_OPTIONS:
        add_argument(run, cls, name)
    common(run)
    run.set_defaults(func=cmd_run)


def _check_options(args: argparse.Namespace) -> None:
    """Refuse options that do not go together, and values their declarations refuse."""
    on_spark = args.backend == "spark"
    if (args.master or args.conf) and not on_spark:
        raise UnsupportedOperation("--master and --conf need --backend spark")
    if (args.streaming or args.checkpoint) and not on_spark:
        raise UnsupportedOperation("--streaming and --checkpoint need --backend spark")
    if on_spark and (args.in_memory or args.fresh or args.follow):
        raise ConfigError(
            "--in-memory, --fresh and --follow are options of the embedded runtime; "
            "with --backend spark use --streaming (and --checkpoint DIR)"
        )
    _check_broker_options(args)
    for cls, name in RUN_OPTIONS:
        check_args(args, cls, [name])
    if args.in_memory and args.workers not in (None, 1):
        raise ConfigError("--in-memory runs in this process: it takes no --workers")
    _check_run_paths(args)


def _check_broker_options(args: argparse.Namespace) -> None:
    """--broker runs the durable embedded runtime (with --backend spark: it is the server
    of the pipeline's Redis streams); --join reads no input."""
    others = [f for f, v in (("--join", args.join), ("--broker-password-file",
              args.broker_password_file), ("--broker-tls-ca", args.broker_tls_ca),
              ("--broker-tls-cert", args.broker_tls_cert), ("--broker-tls-key",
              args.broker_tls_key)) if v]  # fmt: skip
    if not args.broker:
        if others:
            raise ConfigError(f"{', '.join(others)} need(s) --broker URL")
        return
    if args.in_memory or (args.backend == "spark" and args.join):
        raise UnsupportedOperation(
            "--broker keeps the job of the durable embedded runtime; it takes no "
            "--in-memory, and --join needs the embedded runtime (with --backend spark, "
            "--broker is the server of the pipeline's Redis streams)"
        )
    if args.join and (args.input or args.bind or args.fresh):
        raise ConfigError(
            "--join starts workers for a job another run started: that run reads the "
            "inputs (no --input, --bind or --fresh here)"
        )


def cmd_run(args: argparse.Namespace) -> int:
    from rstreams.brokeropts import run_redis_errors
    from rstreams.runner import run

    _check_options(args)
    topology = load_topology(args.pipeline)
    _check_dead_letters(args, topology.job_id)
    inputs = {} if args.join else _inputs(args, topology)
    sinks = topology.sink_topics
    if args.output and len(sinks) != 1:
        raise ConfigError(
            f"--output writes the only sink topic, but {topology.job_id!r} writes "
            f"{len(sinks)}: {sinks}"
        )
    _warn_no_sink(topology, args.quiet)
    progress = _progress(args, topology)
    config = run_config(args)
    spark_options: dict[str, Any] = {}
    if args.backend == "spark":
        config, spark_options = _spark_run(args, config, topology.job_id, sinks)
    metrics = _metrics_server(args, topology.job_id, config)
    try:
        with run_redis_errors(_redis_target(config)):
            result = run(topology, inputs, config, progress=progress, **spark_options)
    finally:
        progress.done()
        if metrics is not None:
            metrics.close()
    _report(args, result, sinks)
    return 0


def _redis_target(config: RunConfig) -> Any:
    """The Redis server the run uses (its broker, or Spark's streams' server), or None."""
    if config.broker is None:
        return None
    from rstreams.runtime.queues.brokers import broker_target

    return broker_target(config)


def _inputs(args: argparse.Namespace, topology: Topology) -> dict[str, str]:
    """Source topic -> input path, from --bind and --input. (A source that is a Redis
    stream, ``RedisStream``, is read from it: no input.)"""
    inputs = _parse_binds(args.bind)
    sources = [t for t in topology.source_topics if t not in topology.external_sources]
    if args.input:
        if len(sources) != 1:
            raise ConfigError(
                f"--input binds the only source topic, but {topology.job_id!r} reads "
                f"{len(sources)}: {sources}; use --bind TOPIC=PATH for each"
            )
        if sources[0] in inputs:
            raise ConfigError(f"topic {sources[0]!r} is bound by both --input and --bind")
        inputs[sources[0]] = args.input
    if not inputs and sources:
        raise ConfigError("nothing to read: give --input PATH (or --bind TOPIC=PATH)")
    return inputs


def _progress(args: argparse.Namespace, topology: Topology) -> RunProgress | LiveRunView:
    """rich's progress bar on stderr (a plain line now and then when it is no terminal),
    or with --live the dashboard of `rstreams top`."""
    from rstreams.progress import RunProgress

    if not args.live:
        return RunProgress(enabled=not args.quiet)
    from rstreams.live import LiveRunView

    if args.backend == "spark" or args.in_memory or args.quiet:
        raise ConfigError(
            "--live shows the workers of the durable embedded runtime; it takes no "
            "--backend spark, --in-memory or -q"
        )
    return LiveRunView(args.data_dir, topology.job_id, topology)


def run_config(args: argparse.Namespace) -> RunConfig:
    """The run's tree of options from the command line's, every one of them (generated
    from the declarations: see :func:`~rstreams.options.from_args`). An in-memory run
    keeps nothing: no data directory, no worker processes."""
    config: RunConfig = from_args(RunConfig, args)
    if not args.in_memory:
        return config
    if args.fresh or args.follow or args.idle_timeout is not None:
        raise ConfigError(
            "--fresh, --follow and --idle-timeout need the durable runtime; drop --in-memory"
        )
    return config.replace(data_dir=None, workers=None)


def _report(args: argparse.Namespace, result: RunResult, sinks: list[str]) -> None:
    """Write or print the final tables, the dead letters and the summary line."""
    from rstreams.runner import write_table

    on_spark = args.backend == "spark"
    if args.output == "-":
        write_table(result.tables[sinks[0]], sys.stdout)
    elif args.output:
        if not on_spark:  # (a Spark run wrote and committed it already)
            write_table(result.tables[sinks[0]], args.output)
    else:
        for topic, table in result.tables.items():
            _print_top(topic, table, args.top)
    durable = not on_spark and not args.in_memory
    extra = ""
    if args.on_error == "dead-letter" and not durable:
        extra = _report_dead_letters(args, result.dead_letters)
    if args.quiet:
        return
    rate = result.records_in / result.elapsed if result.elapsed > 0 else 0.0
    skipped = result.metrics.get("skipped", 0)
    if skipped and not extra:
        verb = "dead-lettered" if args.on_error == "dead-letter" else "skipped"
        extra = f", {skipped:,} {verb}"
    where = f"; wrote {args.output}" if args.output not in (None, "-") else ""
    if result.resumed:  # (what this run did is above; what the table holds, here)
        keys = sum(map(len, result.tables.values()))
        where += (
            f"; the table holds {keys:,} keys, from this run and the earlier ones "
            f"({result.resumed:,} input records before this run)"
        )
    if result.stale:  # (the warning above says why)
        where += f"; from the earlier pipeline: {', '.join(result.stale)} (see above)"
    print(
        f"done: {result.records_in:,} records in, {result.records_out:,} out{extra} "
        f"in {result.elapsed:.2f}s ({rate:,.0f} records/s){where}",
        file=sys.stderr,
    )


def _parse_binds(binds: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for b in binds:
        topic, sep, path = b.partition("=")
        if not sep or not topic or not path:
            raise ConfigError(f"--bind expects TOPIC=PATH; got {b!r}")
        if topic in out:
            raise ConfigError(f"topic {topic!r} is bound twice with --bind")
        out[topic] = path
    return out


def _print_top(topic: str, table: dict[Any, Any], top: int) -> None:
    items = list(table.items())
    if items and all(isinstance(v, (int, float)) and not isinstance(v, bool) for _, v in items):
        items.sort(key=lambda kv: (-kv[1], str(kv[0])))
        title = f"top {min(top, len(items))} of {len(items):,} keys by value"
    else:
        title = f"first {min(top, len(items))} of {len(items):,} keys"
    print(f"{topic}: {title}")
    shown = items[:top]
    width = max((len(str(k)) for k, _ in shown), default=3)
    for k, v in shown:
        print(f"  {k!s:<{width}}  {json.dumps(v, ensure_ascii=False)}")


def _check_dir_option(path: str, option: str) -> None:
    """Refuse a directory option that names a file (or a path under one)."""
    p = Path(path)
    for up in (p, *p.parents):
        if up.exists():
            if not up.is_dir():
                what = "is a file" if up == p else f"is under the file {str(up)!r}"
                raise ConfigError(f"{option} {path!r} {what}; give a directory")
            return


def _check_run_paths(args: argparse.Namespace) -> None:
    """Every path the run will write, checked before any work (a run that fails to write
    its output at the end has done its work for nothing)."""
    from rstreams.runtime.results import check_data_dir, check_output_path

    if args.output:
        check_output_path(args.output, "--output")
    if args.dead_letters:
        check_output_path(args.dead_letters, "--dead-letters")
        if args.output and os.path.abspath(args.output) == os.path.abspath(args.dead_letters):
            raise ConfigError(
                f"--output and --dead-letters both name {args.output!r}; give two files"
            )
    if args.backend == "spark":
        if args.checkpoint:
            _check_dir_option(args.checkpoint, "--checkpoint")
    elif not args.in_memory:
        check_data_dir(args.data_dir)


def _check_dead_letters(args: argparse.Namespace, job_id: str) -> None:
    if not args.dead_letters:
        return
    if args.on_error != "dead-letter":
        raise ConfigError(
            "--dead-letters writes the records that failed: it needs --on-error dead-letter"
        )
    if args.backend != "spark" and not args.in_memory:
        topic = dead_letter_topic(job_id)
        raise ConfigError(
            f"the durable runtime keeps dead letters in the topic {topic!r} of the job's log "
            f"(read them with `rstreams consume {topic} --from-beginning`); --dead-letters is "
            "for --in-memory and --backend spark runs"
        )


def _warn_no_sink(topology: Topology, quiet: bool) -> None:
    """A pipeline without a sink keeps nothing; say so (foreach/print pipelines are fine)."""
    if topology.sink_topics or quiet:
        return
    print(
        f"rstreams: warning: pipeline {topology.job_id!r} has no sink: the run writes no topic "
        "and no table, only its steps' side effects (foreach, print) remain; add "
        ".sink(TOPIC) to keep its results",
        file=sys.stderr,
    )


def _report_dead_letters(args: argparse.Namespace, letters: list[dict[str, Any]]) -> str:
    """Write or print what an in-memory (or Spark) run dead-lettered; returns the words
    for the summary line."""
    from rstreams.runtime.results import write_dead_letters

    n = len(letters)
    if args.dead_letters:
        if args.backend != "spark":  # (a Spark run wrote them already)
            write_dead_letters(letters, args.dead_letters)
        return f", {n:,} dead-lettered to {args.dead_letters}"
    if n:
        print(
            f"rstreams: {n:,} dead letter(s), as JSON lines (--dead-letters PATH writes "
            "them to a file):",
            file=sys.stderr,
        )
        write_dead_letters(letters, sys.stderr)
    return f", {n:,} dead-lettered" if n else ""


def _metrics_server(
    args: argparse.Namespace, job_id: str, config: RunConfig
) -> MetricsServer | None:
    """With --metrics-port: the Prometheus endpoint of the run's statistics, serving."""
    if config.metrics_port is None:
        return None
    if args.backend == "spark" or args.in_memory:
        raise ConfigError(
            "--metrics-port serves the statistics of the embedded runtime's workers; "
            "drop --in-memory and --backend spark"
        )
    from rstreams.runtime.engine.coordination.stats import coordination_dir
    from rstreams.runtime.metrics import MetricsServer

    server = MetricsServer(coordination_dir(args.data_dir, job_id), config.metrics_port)
    # Printed even with -q: with port 0 it is the only way to learn the port.
    print(f"rstreams: metrics on {server.url} (health: /healthz)", file=sys.stderr)
    return server


def _spark_run(
    args: argparse.Namespace, config: RunConfig, job_id: str, sinks: list[str]
) -> tuple[RunConfig, dict[str, Any]]:
    """What the command line means on Spark: ``--workers N`` alone is the master
    ``local[N]``, a streaming checkpoint defaults to one under the data directory; and
    run()'s ``outputs`` (the tables to commit). ``--broker`` (the server of the
    pipeline's RedisStream sources and sinks) is the config's."""
    if config.master is None and config.workers is not None:
        config = config.replace(master=f"local[{config.workers}]")
    if config.on_spark.streaming and config.on_spark.checkpoint is None:
        where = os.path.join(config.durable_data_dir, job_id, "spark-checkpoint")
        config = config.replace(on_spark=attrs.evolve(config.on_spark, checkpoint=where))
    outputs = {}
    if args.output and args.output != "-":
        outputs[sinks[0]] = args.output
    if args.dead_letters:
        outputs[dead_letter_topic(job_id)] = args.dead_letters
    return config, {"outputs": outputs} if outputs else {}
