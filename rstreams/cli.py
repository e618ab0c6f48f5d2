"""The ``rstreams`` command.

Exit codes: 0 success, 1 a record failed processing (or another runtime failure),
2 bad usage or configuration, 3 the pipeline file could not be loaded, 130 interrupted
(Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rstreams import __version__
from rstreams.config import (
    BACKENDS,
    DEFAULT_DATA_DIR,
    GUARANTEES,
    ON_ERROR,
    STATE_BACKENDS,
    RunConfig,
    dead_letter_topic,
)
from rstreams.errors import (
    ConfigError,
    PipelineFileError,
    ProcessingError,
    RStreamsError,
    StorageError,
    TopologyError,
    UnsupportedOperation,
)
from rstreams.loader import load_topology

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PIPELINE = 0, 1, 2, 3
#: The run options' defaults, which the parser shows and passes on: RunConfig's own.
DEFAULTS = RunConfig()

if TYPE_CHECKING:
    from rstreams.planner.topology import Topology
    from rstreams.runtime.metrics import MetricsServer

log = logging.getLogger("rstreams")


# -- run ----------------------------------------------------------------------------------


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


def cmd_run(args: argparse.Namespace) -> int:
    from rstreams.runner import run, write_table

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
    if args.broker:
        raise UnsupportedOperation(
            "--broker is not available in this version; the embedded runtime runs in process"
        )
    if args.rebalance_interval < 1:
        raise ConfigError(
            f"--rebalance-interval must be at least 1 s; got {args.rebalance_interval}"
        )
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1; got {args.workers}")
    if args.top < 0:
        raise ConfigError(f"--top must be >= 0; got {args.top}")
    if args.max_restarts < 0:
        raise ConfigError(f"--max-restarts must be >= 0; got {args.max_restarts}")
    if args.in_memory and args.workers not in (None, 1):
        raise ConfigError("--in-memory runs in this process: it takes no --workers")
    _check_run_paths(args)
    topology = load_topology(args.pipeline)
    _check_dead_letters(args, topology.job_id)
    inputs = _parse_binds(args.bind)
    if args.input:
        sources = topology.source_topics
        if len(sources) != 1:
            raise ConfigError(
                f"--input binds the only source topic, but {topology.job_id!r} reads "
                f"{len(sources)}: {sources}; use --bind TOPIC=PATH for each"
            )
        if sources[0] in inputs:
            raise ConfigError(f"topic {sources[0]!r} is bound by both --input and --bind")
        inputs[sources[0]] = args.input
    if not inputs:
        raise ConfigError("nothing to read: give --input PATH (or --bind TOPIC=PATH)")
    sinks = topology.sink_topics
    if args.output and len(sinks) != 1:
        raise ConfigError(
            f"--output writes the only sink topic, but {topology.job_id!r} writes "
            f"{len(sinks)}: {sinks}"
        )
    _warn_no_sink(topology, args.quiet)
    # rich's progress bar on stderr (a plain line now and then when it is no terminal),
    # or with --live the dashboard of `rstreams top`.
    from rstreams.live import LiveRunView, RunProgress

    progress: RunProgress | LiveRunView = RunProgress(enabled=not args.quiet)
    if args.live:
        if on_spark or args.in_memory or args.quiet:
            raise ConfigError(
                "--live shows the workers of the durable embedded runtime; it takes no "
                "--backend spark, --in-memory or -q"
            )
        progress = LiveRunView(args.data_dir, topology.job_id, topology)
    config = RunConfig(
        on_error=args.on_error,
        allow_topology_change=args.allow_topology_change,
        metrics_port=args.metrics_port,
        live=args.live,
    )
    spark_options: dict[str, Any] = {}
    if on_spark:
        spark_options = _spark_options(args, topology.job_id, sinks)
    elif not args.in_memory:
        config = config.replace(
            workers=args.workers,  # (None: one per core)
            data_dir=args.data_dir,
            pipeline=args.pipeline,
            fresh=args.fresh,
            follow=args.follow,
            guarantee=args.guarantee,
            state=args.state,
            max_restarts=args.max_restarts,
            worker_args=[
                "--allocation", args.allocation,
                "--rebalance-interval", str(args.rebalance_interval),
                *(
                    ["--source-idle-ms", str(round(args.idle_timeout * 1000))]
                    if args.idle_timeout is not None
                    else []
                ),
            ],
        )  # fmt: skip
    elif args.fresh or args.follow or args.idle_timeout is not None:
        raise ConfigError(
            "--fresh, --follow and --idle-timeout need the durable runtime; drop --in-memory"
        )
    metrics = _metrics_server(args, topology.job_id, config)
    try:
        result = run(topology, inputs, config, progress=progress, **spark_options)
    finally:
        progress.done()
        if metrics is not None:
            metrics.close()
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
    if not args.quiet:
        rate = result.records_in / result.elapsed if result.elapsed > 0 else 0.0
        skipped = result.metrics.get("skipped", 0)
        if skipped and not extra:
            verb = "dead-lettered" if args.on_error == "dead-letter" else "skipped"
            extra = f", {skipped:,} {verb}"
        where = f"; wrote {args.output}" if args.output not in (None, "-") else ""
        if result.stale:  # (the warning above says why)
            where += f"; from the earlier pipeline: {', '.join(result.stale)} (see above)"
        print(
            f"done: {result.records_in:,} records in, {result.records_out:,} out{extra} "
            f"in {result.elapsed:.2f}s ({rate:,.0f} records/s){where}",
            file=sys.stderr,
        )
    return EXIT_OK


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
    from rstreams.runtime.engine.stats import coordination_dir
    from rstreams.runtime.metrics import MetricsServer

    server = MetricsServer(coordination_dir(args.data_dir, job_id), config.metrics_port)
    # Printed even with -q: with port 0 it is the only way to learn the port.
    print(f"rstreams: metrics on {server.url} (health: /healthz)", file=sys.stderr)
    return server


def _spark_options(args: argparse.Namespace, job_id: str, sinks: list[str]) -> dict[str, Any]:
    """run() options of the Spark backend: master (``--workers N`` alone means
    ``local[N]``), streaming with its checkpoint, and the output to commit."""
    master = args.master
    if master is None and args.workers is not None:
        master = f"local[{args.workers}]"
    options: dict[str, Any] = {"master": master, "backend": "spark"}
    conf: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--conf expects KEY=VALUE; got {item!r}")
        conf[key.strip()] = value
    if conf:
        options["conf"] = conf
    outputs = {}
    if args.output and args.output != "-":
        outputs[sinks[0]] = args.output
    if args.dead_letters:
        outputs[dead_letter_topic(job_id)] = args.dead_letters
    if outputs:
        options["outputs"] = outputs
    if args.streaming:
        options["streaming"] = True
        options["checkpoint"] = args.checkpoint or os.path.join(
            args.data_dir, job_id, "spark-checkpoint"
        )
    return options


def cmd_graph(args: argparse.Namespace) -> int:
    from rstreams.runtime.results import check_output_path

    check_output_path(args.output, "-o")
    topology = load_topology(args.pipeline)
    path = topology.render(args.output, args.format)
    if not args.quiet:
        print(f"wrote {path}", file=sys.stderr)
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    sys.stdout.write(load_topology(args.pipeline).describe())
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    # Exit codes as diff(1): 0 nothing lost, 1 state would be lost or misread, 2 trouble.
    try:
        old, new = load_topology(args.old), load_topology(args.new)
    except PipelineFileError as e:
        return _fail(EXIT_USAGE, str(e))
    d = old.diff(new)
    if args.json:
        sys.stdout.write(d.to_json())
    elif not args.quiet:
        sys.stdout.write(d.describe())
    return EXIT_FAILED if d.loses_state else EXIT_OK


# -- argument parsing ---------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", help="print only results and errors")
    g.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)"
    )


PIPELINE_HELP = "a Python file whose build() returns a Topology or a StreamBuilder"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rstreams",
        description="Run, describe and draw rstreams pipelines.",
        epilog="A pipeline file defines build() returning a Topology or a StreamBuilder.",
    )
    parser.add_argument("--version", action="version", version=f"rstreams {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run a pipeline over input files",
        description="Run a pipeline over bounded input and print or write its final table.",
    )
    run.add_argument("pipeline", metavar="PIPELINE.py", help=PIPELINE_HELP)
    run.add_argument(
        "--input", metavar="PATH", help="text file for the only source topic (- for stdin)"
    )
    run.add_argument(
        "--bind",
        metavar="TOPIC=PATH",
        action="append",
        default=[],
        help="bind a source topic to a text file (repeatable)",
    )
    run.add_argument(
        "--output",
        metavar="PATH",
        help="write the final table of the only sink topic as JSON lines "
        '{"key": ..., "value": ...} (- for stdout); a windowed result as '
        '{"key": ..., "window": {"start": ..., "end": ...}, ["closed": ...,] "value": ...}',
    )
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        default=DEFAULTS.backend,
        help="embedded: rstreams' own runtime (durable, or --in-memory); spark: Apache Spark "
        "through PySpark (default: %(default)s)",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes of the embedded runtime (default: the number of cores)",
    )
    run.add_argument("--broker", metavar="URL", help="broker URL (not available yet)")
    run.add_argument(
        "--master",
        metavar="URL",
        help="Spark master URL with --backend spark (default local[*], or spark-submit's)",
    )
    run.add_argument(
        "--conf",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a Spark setting with --backend spark, as spark-submit's --conf (repeatable), "
        "e.g. spark.pyspark.python=PATH or spark.archives=env.tar.gz#environment",
    )
    run.add_argument(
        "--streaming",
        action="store_true",
        help="with --backend spark: Structured Streaming over the input directory "
        "(RocksDB state; a run with the same checkpoint continues the counts)",
    )
    run.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="streaming checkpoint (default: <--data-dir>/<job-id>/spark-checkpoint)",
    )
    run.add_argument(
        "--data-dir",
        metavar="DIR",
        default=DEFAULT_DATA_DIR,
        help="log, offsets and state of the embedded runtime; a job lives in DIR/<job-id> "
        "and a run resumes what an earlier one left (default ./.rstreams)",
    )
    run.add_argument(
        "--fresh", action="store_true", help="start the job over: delete DIR/<job-id> first"
    )
    run.add_argument(
        "--allow-topology-change",
        action="store_true",
        help="run even if the pipeline changed since the job's last run in a way that "
        "loses or misreads its state (without it such a run refuses and shows the diff: "
        "see `rstreams diff`)",
    )
    run.add_argument(
        "--guarantee",
        choices=GUARANTEES,
        default=DEFAULTS.guarantee,
        help="processing guarantee of the embedded runtime (default: %(default)s). "
        "at-least-once is faster but, after a worker fails and is restarted, counts the "
        "records it processed since its last commit again: results may include duplicates "
        "(the run then ends with a warning saying how many restarts happened)",
    )
    run.add_argument(
        "--state",
        choices=STATE_BACKENDS,
        default=DEFAULTS.state,
        help="state stores of the embedded runtime (default: %(default)s)",
    )
    run.add_argument(
        "--allocation",
        choices=("averagely", "averagely_by_circle", "consistent_hash"),
        default="averagely",
        help="how the group splits tasks among workers (RocketMQ strategies; default averagely)",
    )
    run.add_argument(
        "--rebalance-interval",
        type=float,
        default=20.0,
        metavar="S",
        help="seconds between periodic rebalances (min 1; membership changes act at once)",
    )
    run.add_argument(
        "--follow",
        action="store_true",
        help=(
            "keep reading lines appended to the input files until Ctrl-C, then report; an "
            "input truncated, rewritten or replaced meanwhile stops the run (exit 2)"
        ),
    )
    run.add_argument(
        "--live",
        action="store_true",
        help="show the dashboard of `rstreams top` on stderr while the run goes on "
        "(steps, workers, queues, state stores) instead of the progress bar",
    )
    run.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="S",
        help="durable runtime: a source queue with no new record for S seconds stops holding "
        "back event time (watermarks) after a shuffle, even where its input has records "
        "still to come (default: never). Input files need none: a queue that has read all "
        "the ingest gave it holds nothing back, and a file read to its end (for now, with "
        "--follow) holds nothing back at all, so a followed run closes its windows",
    )
    run.add_argument(
        "--in-memory",
        action="store_true",
        help="run in this process on memory queues (fast; nothing is kept or resumable)",
    )
    run.add_argument(
        "--on-error",
        choices=ON_ERROR,
        default=DEFAULTS.on_error,
        help="what to do with a record a user function throws on: stop the run (fail), "
        "skip it, or skip it and keep it (dead-letter: the durable runtime appends it to "
        "the topic <job-id>-dead-letter, read with `rstreams consume`; --in-memory and "
        "Spark runs print the dead letters on stderr, or write them to --dead-letters "
        "PATH) (default: %(default)s)",
    )
    run.add_argument(
        "--dead-letters",
        metavar="PATH",
        help="with --on-error dead-letter on --in-memory or --backend spark: write the "
        "records that failed (step, topic, offset, key, value, error) as JSON lines to PATH",
    )
    run.add_argument(
        "--top",
        type=int,
        default=20,
        metavar="N",
        help="rows of each table to print without --output (default: %(default)s)",
    )
    run.add_argument(
        "--max-restarts",
        type=int,
        default=DEFAULTS.max_restarts,
        metavar="N",
        help="durable runtime: restart a worker that dies (killed, or an unexpected error) "
        "with a backoff, and give up after N restarts in a row without progress (no "
        "commit); 0: never restart (default %(default)s)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics (/metrics) and /healthz on 127.0.0.1:PORT while the "
        "run goes on (0: a free port, printed); needs pip install 'rstreams[ops]'",
    )
    _common(run)
    run.set_defaults(func=cmd_run)

    graph = sub.add_parser(
        "graph",
        help="draw a pipeline's topology",
        description="Render the topology as SVG, PNG, PDF or DOT (format from the extension).",
    )
    graph.add_argument("pipeline", metavar="PIPELINE.py", help=PIPELINE_HELP)
    graph.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="OUT.svg|.png|.pdf|.dot"
    )
    graph.add_argument(
        "--format", choices=("svg", "png", "pdf", "dot"), help="override the extension"
    )
    _common(graph)
    graph.set_defaults(func=cmd_graph)

    describe = sub.add_parser(
        "describe",
        help="print a pipeline's topology as text",
        description="Print sub-topologies, processors, topics and state stores.",
    )
    describe.add_argument("pipeline", metavar="PIPELINE.py", help=PIPELINE_HELP)
    _common(describe)
    describe.set_defaults(func=cmd_describe)

    diff = sub.add_parser(
        "diff",
        help="what changing a pipeline would do to its job's state",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Compare two versions of a pipeline: steps added, removed or renamed (a step
moved in its chain gets another generated name), internal topics and stores
whose name, serde, window or queue count changed, and which state would be
lost (orphaned under its old name) or misread. A kept store or sink topic
with a changed step before it (added, removed, moved, other code) is STALE:
a resumed job does not read the input it already consumed again, so the
change applies to new input only; --fresh recomputes from all input.

exit codes: 0 no state lost, 1 some state would be lost or misread,
2 bad usage or a pipeline file that does not load (stale alone is 0:
the change is compatible)""",
        epilog="""\
example:
  rstreams diff wordcount.py wordcount_v2.py
  rstreams diff wordcount.py wordcount_v2.py --json

Give a stateful step a name (e.g. .count(name="word-count")) and its store
keeps that name whatever you change around it.""",
    )
    diff.add_argument("old", metavar="OLD.py", help="the pipeline the job ran with")
    diff.add_argument("new", metavar="NEW.py", help="the changed pipeline")
    diff.add_argument(
        "--json",
        action="store_true",
        help='print the diff as JSON (format 2: "loses_state", "stale", and each step, topic '
        'and store with its "status" and "effect")',
    )
    _common(diff)
    diff.set_defaults(func=cmd_diff)

    from rstreams.admin import add_parsers
    from rstreams.live import add_parsers as add_live_parsers
    from rstreams.runtime.spark.packenv import add_parsers as add_spark_parsers

    add_parsers(sub, _common)
    add_live_parsers(sub, _common)
    add_spark_parsers(sub, _common)
    return parser


def _fail(code: int, msg: str) -> int:
    print(f"rstreams: error: {msg}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    level = logging.WARNING
    if args.quiet:
        level = logging.ERROR
    elif args.verbose:
        level = logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # SIGINT and SIGTERM stop any command as Ctrl-C does (exit code 130; `run` stops its
    # workers), also where they were inherited ignored (a background job of a script).
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _raise_interrupt) for sig in _STOP_SIGNALS}
    try:
        code: int = args.func(args)
        return code
    except PipelineFileError as e:
        if args.verbose and e.__cause__ is not None:
            traceback.print_exception(e.__cause__)
        return _fail(EXIT_PIPELINE, str(e))
    except ProcessingError as e:
        return _fail(EXIT_FAILED, e.command_line_message())
    except (ConfigError, UnsupportedOperation, TopologyError) as e:
        return _fail(EXIT_USAGE, str(e))
    except RStreamsError as e:
        return _fail(EXIT_FAILED, str(e))
    except KeyboardInterrupt:
        return _fail(130, "interrupted")
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, like other Unix tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as e:
        if e.errno not in StorageError.ERRNOS:
            raise  # anything else is a bug: its traceback
        # The data directory's disk is full or failing (an ingest append, statistics).
        return _fail(EXIT_FAILED, str(StorageError.of(e)))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
