"""``run_spark``: run a topology on Apache Spark, batch or Structured Streaming."""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
from py4j.protocol import Py4JError
from pyspark import cloudpickle
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rstreams import interrupts
from rstreams.config import RunConfig, dead_letter_topic
from rstreams.dsl import nodes as n
from rstreams.errors import ON_ERROR_HINT, ConfigError, ProcessingError, RStreamsError
from rstreams.planner.diff import TopologyDiff
from rstreams.planner.topology import Topology
from rstreams.runtime.inputs import check_inputs
from rstreams.runtime.queues.redisstreams.target import RedisTarget
from rstreams.runtime.results import (
    Progress,
    RunResult,
    check_output_path,
    letter_text,
    write_dead_letters,
)
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.checkpoints import guard_checkpoint, stale_at_checkpoint_end
from rstreams.runtime.spark.compiler import Compiler, SourceInfo
from rstreams.runtime.spark.native import calibrate
from rstreams.runtime.spark.options import redis_target, spark_config
from rstreams.runtime.spark.rules import register_rules
from rstreams.runtime.spark.segments import FAILURE_MARK, ListParam, RecordFailed
from rstreams.runtime.spark.session import (
    check_executors,
    configure_state_store,
    get_session,
    stop_session,
)
from rstreams.runtime.spark.tables import Failures, is_local, local_path

log = logging.getLogger("rstreams.spark")


@contextlib.contextmanager
def _term_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a run like Ctrl-C, so that the ``finally`` that stops the session
    and its JVM runs (on the main thread; elsewhere signals are not ours to set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: Any) -> None:
    interrupts.note(signum)  # (the command's exit code: 143 for SIGTERM)
    raise KeyboardInterrupt


class _SignalWatcher:
    """Cancels the running Spark jobs when SIGINT or SIGTERM arrives.

    Python runs signal handlers on the main thread between bytecodes, but while a job
    runs the main thread sits in a socket read from the JVM; when the kernel hands the
    signal to another thread, nothing wakes it and Ctrl-C or SIGTERM waits for the job
    to finish. The interpreter's C handler also writes the signal to a wakeup fd from
    whatever thread got it: a thread reading that fd cancels the jobs, the main thread's
    read returns, and the handler raises KeyboardInterrupt there.
    """

    def __init__(self, session: SparkSession, stop_queries: bool = False) -> None:
        self.session = session
        self.stop_queries = stop_queries
        self._fds: tuple[int, int] | None = None
        self._previous = -1
        self.signalled = False

    def start(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # (the wakeup fd can only be set on the main thread)
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._fds = (r, w)
        self._previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(
            target=self._watch, args=(r,), name="rstreams-signals", daemon=True
        ).start()

    def _watch(self, r: int) -> None:
        wanted = {int(signal.SIGINT), int(signal.SIGTERM)}
        try:
            while data := os.read(r, 64):
                if wanted & set(data):
                    self.signalled = True
                    with contextlib.suppress(Exception):  # the context may be stopping
                        if self.stop_queries:
                            for query in self.session.streams.active:
                                query.stop()
                        else:
                            self.session.sparkContext.cancelAllJobs()
        except OSError:
            pass
        finally:
            os.close(r)  # here, once reading is over: the fd can't be reused under it

    def stop(self) -> None:
        if self._fds is None:
            return
        _, w = self._fds
        self._fds = None
        signal.set_wakeup_fd(self._previous)
        os.close(w)  # the watcher's read returns empty and it ends


@_term_as_interrupt()
def run_spark(
    topology: Topology,
    inputs: dict[str, str],
    *,
    outputs: dict[str, str] | None = None,
    master: str | None = None,
    spark: SparkSession | None = None,
    streaming: bool | None = None,
    checkpoint: str | None = None,
    on_error: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    trigger_once: bool | None = None,
    collect: bool | None = None,
    conf: dict[str, str] | None = None,
    exact_unicode: bool | None = None,
    config: RunConfig | None = None,
    redis: str | RedisTarget | None = None,
) -> RunResult:
    """Run ``topology`` on Spark and return the final table of every sink.

    The options are those of :class:`~rstreams.config.RunConfig` (``master``,
    ``on_error``, ``broker``) and of its :class:`~rstreams.config.SparkConfig` section
    (``streaming``, ``checkpoint``, ``trigger_once``, ``collect``, ``conf``,
    ``exact_unicode``), with their defaults there: give them as ``config``, or as
    keywords. A keyword that disagrees with a ``config`` given is refused (one of the
    two would be ignored)::

        run_spark(topology, {"lines": "in.txt"}, on_error="skip")
        run_spark(topology, {"lines": "in.txt"}, config=RunConfig(on_error="skip"))
        run_spark(topology, {"lines": "inbox/"}, streaming=True, checkpoint="ckpt")

    Args:
        topology: from ``StreamBuilder.build()``.
        inputs: source topic -> text file, directory or glob (one record per line; the
            source's deserializer decodes each line, e.g. ``"json"`` for JSON lines).
            Streaming mode reads a directory, picking up files as they arrive.
        outputs: sink topic -> path: the final table as JSON lines
            ``{"key": ..., "value": ...}`` (windowed results with ``"window"``: the
            lines of :func:`rstreams.runtime.results.table_lines`, as the embedded
            ``run`` writes them), written to a temporary name and renamed
            once the run succeeded. A local path gets one file (like the embedded
            ``run``); a URL (``hdfs://``, ``s3a://``...) a directory of part files.
            ``"<job>-dead-letter"`` may name where dead letters go.
        master: Spark master URL (``local[*]`` by default, ``spark://host:7077``...);
            ignored when ``spark`` is given or under spark-submit.
        spark: a SparkSession to use (and not stop).
        streaming: Structured Streaming over the input directories, stateful steps in
            RocksDB state stores; ``checkpoint`` is then required, and running again
            with the same checkpoint continues from where the last run stopped.
        on_error: ``"fail"``, ``"skip"`` or ``"dead-letter"``, as on the embedded engine.
        progress: called about twice a second with a :class:`~rstreams.runtime.results.Progress`
            whose ``detail`` names the running Spark stage.
        trigger_once: streaming: process what is there and stop (``availableNow``);
            False keeps running until interrupted (Ctrl-C).
        collect: return the tables in ``RunResult.tables`` (set False for outputs too
            big for the driver: they are then written by the executors).
        conf: extra Spark settings for a session this call creates.
        exact_unicode: make ``F.lower()``/``F.upper()`` equal to Python's for the few
            characters whose case mapping Spark's (newer) Unicode tables change (a test
            per non-ASCII line). False uses Spark's mapping as is.
        config: a :class:`~rstreams.config.RunConfig`, as :func:`rstreams.run` passes
            it: its ``on_error``, ``master``, ``allow_topology_change``, ``broker`` (with
            the ``broker_*`` files) and ``spark`` section are used (the other options are
            the embedded runtime's).
        redis: the Redis server (``redis://host:port/db`` or a
            :class:`~rstreams.runtime.queues.redisstreams.target.RedisTarget`) of the
            topology's ``RedisStream`` sources and sinks, read and written by the
            ``rstreams-redis`` data source (:mod:`.redisstreams`); a password only from
            a password file every executor can read. Default: ``config.broker``.

    The final tables equal those of the embedded engine for the same input (keys in
    no particular order). See docs/spark.md.
    """
    config = spark_config(
        config, master=master, on_error=on_error, streaming=streaming, checkpoint=checkpoint,
        trigger_once=trigger_once, collect=collect, conf=conf, exact_unicode=exact_unicode,
    )  # fmt: skip
    s, outputs = config.on_spark, dict(outputs or {})
    target = redis_target(config, redis)
    checkpoint = s.checkpoint if s.streaming else None
    pipeline, sources = _check_run(
        topology, inputs, outputs, s.streaming, s.checkpoint, s.collect, target
    )
    # A checkpoint resumed with other code mixes both versions' answers: refused when it
    # would lose or misread state, said at start and end when it leaves it stale.
    change = guard_checkpoint(topology, checkpoint, inputs, config)
    session, created = get_session(
        config.master, spark, app_name=f"rstreams-{topology.job_id}", conf=s.conf_dict() or None
    )
    try:
        plan = _Plan(topology, inputs, outputs, pipeline, sources, target, change)
        return _run_on(session, plan, config, progress)
    finally:
        if created:
            stop_session(session)


@attrs.frozen
class _Plan:
    """What a run on Spark runs, once its options are checked."""

    topology: Topology
    inputs: dict[str, str]
    outputs: dict[str, str]
    pipeline: n.Pipeline
    sources: dict[str, SourceInfo]
    target: RedisTarget | None
    change: TopologyDiff | None


def _run_on(
    session: SparkSession,
    plan: _Plan,
    config: RunConfig,
    progress: Callable[[Progress], None] | None,
) -> RunResult:
    """Run ``plan`` on ``session``: its queries under a watcher of Ctrl-C and SIGTERM,
    with a progress reporter, and the user's code pickled by value while they run."""
    s, on_error = config.on_spark, config.on_error
    start = time.monotonic()
    reporter: _ProgressReporter | None = None
    compiler: Compiler | None = None
    by_value: list[types.ModuleType] = []
    # An endless streaming run ends on Ctrl-C by stopping its queries (and returns what
    # it has); anything else is cancelled and the run stops with KeyboardInterrupt.
    watcher = _SignalWatcher(session, stop_queries=s.streaming and not s.trigger_once)
    try:
        watcher.start()
        reporter = _ProgressReporter(session, progress, start) if progress else None
        by_value = _pickle_user_code_by_value(plan.pipeline)
        check_executors(session)
        if s.streaming:
            configure_state_store(session)
        accumulator: Any = (
            session.sparkContext.accumulator([], ListParam()) if on_error != "fail" else None
        )
        register_rules()  # (the compiler's translation rules; idempotent)
        compiler = Compiler(
            session, plan.pipeline, plan.sources, streaming=s.streaming, on_error=on_error,
            calibration=functools.partial(calibrate, session, case=s.exact_unicode),
            accumulator=accumulator,
        )  # fmt: skip
        failures = Failures(on_error)
        if reporter:
            reporter.start()
        try:
            tables, records_in, records_out = _run_queries(
                compiler, plan.topology, plan.outputs, failures,
                s.checkpoint if s.streaming else None, s.trigger_once, s.collect, plan.target,
            )  # fmt: skip
        except (PySparkException, Py4JError, RecordFailed) as e:
            if watcher.signalled:  # the jobs failed because the watcher cancelled them
                raise KeyboardInterrupt from None
            raise translate_error(e, session, plan.sources) from None
        elapsed = time.monotonic() - start
        metrics, dead = _report_failures(
            failures, accumulator, records_in, plan.topology, plan.outputs
        )
        stale_at_checkpoint_end(plan.change, records_in, plan.inputs)
        return RunResult(tables, records_in, records_out, elapsed, metrics, dead_letters=dead)
    finally:
        watcher.stop()
        for module in by_value:
            cloudpickle.unregister_pickle_by_value(module)
        if reporter:
            reporter.stop()
        if compiler is not None:
            for df in compiler.persisted:
                with contextlib.suppress(Exception):  # the session may be gone already
                    df.unpersist()


def _check_run(
    topology: Topology,
    inputs: dict[str, str],
    outputs: dict[str, str],
    streaming: bool,
    checkpoint: str | None,
    collect: bool,
    target: RedisTarget | None,
) -> tuple[n.Pipeline, dict[str, SourceInfo]]:
    """The logical pipeline of ``topology`` and its sources (each with the input files
    it reads), once the arguments of :func:`run_spark` are known to fit it."""
    pipeline = topology.pipeline
    if pipeline is None:
        raise ConfigError("this Topology has no logical pipeline; build it with StreamBuilder")
    _check_bindings(topology, inputs, outputs, target, streaming)
    if streaming and not checkpoint:
        raise ConfigError(
            "streaming mode needs a checkpoint directory (checkpoint=...); running again "
            "with the same one continues the counts"
        )
    if not collect and any(t not in outputs for t in topology.sink_topics):
        raise ConfigError("collect=False needs an output path for every sink topic")
    order = {t: i for i, t in enumerate(pipeline.sources)}
    sources = {
        topic: SourceInfo(order[topic], topic, _resolve_input(topic, path, streaming))
        for topic, path in inputs.items()
    }
    for topic, spec in topology.external_sources.items():
        sources[topic] = SourceInfo(order[topic], topic, (), redis=(target, spec))
    return pipeline, sources


def _run_queries(
    compiler: Compiler,
    topology: Topology,
    outputs: dict[str, str],
    failures: Failures,
    checkpoint: str | None,
    trigger_once: bool,
    collect: bool,
    target: RedisTarget | None,
) -> tuple[dict[str, dict[Any, Any]], int, int]:
    """Run the compiled pipeline: as streaming queries when given a ``checkpoint``,
    else as batch jobs. Returns (tables, records in, records out)."""
    if checkpoint is not None:
        from rstreams.runtime.spark.streaming import run_streaming

        return run_streaming(compiler, topology, outputs, checkpoint, trigger_once, failures)
    from rstreams.runtime.spark.batch import run_batch

    return run_batch(compiler, topology, outputs, collect, failures, target)


def _report_failures(
    failures: Failures,
    accumulator: Any,
    records_in: int,
    topology: Topology,
    outputs: dict[str, str],
) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The run's metrics and dead letters: the failed records (the driver's, and the
    workers' from ``accumulator`` unless None) are logged, counted, and written where the
    outputs name the dead-letter topic (``on_error="dead-letter"``)."""
    if accumulator is not None:
        failures.add_worker(accumulator.value)
    failures.log()
    job_id = topology.job_id
    dead_letter = failures.on_error == "dead-letter"
    if dead_letter and dead_letter_topic(job_id) in outputs:
        _write_dead_letters(failures, outputs[dead_letter_topic(job_id)])
    metrics = {"records_in": records_in, **failures.metrics()}
    return metrics, failures.dead_letters() if dead_letter else []


def _pickle_user_code_by_value(pipeline: n.Pipeline) -> list[types.ModuleType]:
    """Ship the code of user functions to the workers by value.

    cloudpickle pickles a function of an importable module by reference, and a worker
    can not import a module that only the driver can (a script's neighbour, a test
    file). User modules (not the standard library, not installed packages, not
    rstreams) are registered to be pickled by value for the run.
    """
    fns: list[Any] = []
    for node in pipeline.nodes:
        fns += [getattr(node, "fn", None), getattr(node, "initializer", None)]
        for serde in (getattr(node, "value_serde", None), getattr(node, "key_serde", None)):
            fns += [getattr(serde, "_de", None), getattr(serde, "_ser", None)]
    registered = set(cloudpickle.list_registry_pickle_by_value())
    out: list[types.ModuleType] = []
    for fn in fns:
        name = getattr(fn, "__module__", None)
        module = sys.modules.get(name) if isinstance(name, str) else None
        if module is None or name in registered or not _is_user_module(module):
            continue
        cloudpickle.register_pickle_by_value(module)
        registered.add(module.__name__)
        out.append(module)
    return out


def _is_user_module(module: types.ModuleType) -> bool:
    name = module.__name__
    if name == "__main__" or name.split(".")[0] in ("rstreams", "pyspark", "builtins"):
        return False
    if name.split(".")[0] in sys.stdlib_module_names:
        return False
    path = getattr(module, "__file__", None)
    if not path:
        return False
    parts = Path(path).resolve().parts
    return "site-packages" not in parts and "dist-packages" not in parts


def _check_bindings(
    topology: Topology,
    inputs: dict[str, str],
    outputs: dict[str, str],
    target: RedisTarget | None,
    streaming: bool,
) -> None:
    external = {**topology.external_sources, **topology.external_sinks}
    if external and target is None:
        raise ConfigError(
            f"topic(s) {sorted(external)} are Redis streams (RedisStream): give the Spark "
            f"run their server (redis='redis://<host>:<port>/<db>')"
        )
    if streaming and topology.external_sinks:
        raise ConfigError(
            f"sink topic(s) {sorted(topology.external_sinks)} are Redis streams: the Spark "
            f"backend writes those in batch runs only (streaming reads them)"
        )
    check_inputs(topology, inputs)
    allowed = {*topology.sink_topics, dead_letter_topic(topology.job_id)}
    wrong = [t for t in outputs if t not in allowed]
    if wrong:
        raise ConfigError(
            f"topic(s) {wrong} are not sinks of {topology.job_id!r}; "
            f"its sinks are {topology.sink_topics}"
        )
    for topic, path in outputs.items():
        check_output_path(path, f"output of {topic!r}")


def _resolve_input(topic: str, path: str, streaming: bool) -> tuple[str, ...]:
    """Check a local input path up front (clear errors instead of Spark's); URLs are
    left to Spark."""
    if path == "-":
        raise ConfigError("the Spark backend can not read stdin; give a file or directory")
    if not is_local(path):
        return (path,)
    p = local_path(path)
    if glob.has_magic(p):
        matches = sorted(glob.glob(p))
        if not matches:
            raise ConfigError(f"input {path!r} of topic {topic!r} matches no file")
        if streaming:
            raise ConfigError(f"streaming reads a directory; got the glob {path!r}")
        for m in matches:
            _check_readable(m)
        return (os.path.abspath(p),)
    if not os.path.exists(p):
        raise ConfigError(f"input file {path!r} does not exist")
    if streaming and not os.path.isdir(p):
        raise ConfigError(f"streaming reads a directory as new files arrive; {path!r} is a file")
    if os.path.isdir(p):
        for root, _, files in os.walk(p):
            for f in files:
                if not f.startswith((".", "_")):
                    _check_readable(os.path.join(root, f))
    else:
        _check_readable(p)
    return (os.path.abspath(p),)


def _check_readable(path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise ConfigError(f"can not read input file {path!r}: {e.strerror}") from None


def _write_dead_letters(failures: Failures, path: str) -> None:
    write_dead_letters(failures.dead_letters(), local_path(path))


# -- errors -------------------------------------------------------------------------------


_MASK33 = (1 << 33) - 1


def translate_error(
    e: BaseException, spark: SparkSession, sources: dict[str, SourceInfo]
) -> RStreamsError:
    """A Spark failure as an rstreams error: a failed record becomes a
    ProcessingError naming the step, the input file and line, the record and the
    function; anything else keeps Spark's first line."""
    text = str(e)
    at = text.find(FAILURE_MARK)
    if at < 0:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        first = lines[0] if lines else type(e).__name__
        if "Traceback (most recent call last)" in text:
            # A Python worker died outside any step: its exception line says why.
            first = next(
                (ln for ln in reversed(lines) if re.match(r"^[\w.]+(Error|Exception)\b", ln)),
                first,
            )
        if "PATH_NOT_FOUND" in text or "FileNotFoundException" in text:
            return ConfigError(f"Spark could not read an input: {first}")
        return ProcessingError(f"the Spark job failed: {first}")
    try:
        info, _ = json.JSONDecoder().raw_decode(text, at + len(FAILURE_MARK))
    except ValueError:
        return ProcessingError(text[at : at + 500])
    where, line = _locate(info, spark, sources)
    what = f" in {info['fn']}" if info.get("fn") else ""
    message = (
        f"step {info['step']!r} failed on the record at {where} (key={letter_text(info, 'key')}, "
        f"value={letter_text(info, 'value')}){what}: {info.get('error')}\n  {ON_ERROR_HINT}"
    )
    return ProcessingError(
        message,
        step=info.get("step"),
        topic=info.get("topic"),
        offset=None if line is None else line - 1,
    )


def _locate(
    info: dict[str, Any], spark: SparkSession, sources: dict[str, SourceInfo]
) -> tuple[str, int | None]:
    """('<topic>: <file> line <n>', n) of a failed record, as far as Spark tells."""
    src: SourceInfo | None = sources.get(info.get("topic") or "")
    partition = row = None
    path: str | None = None
    if info.get("mono") is not None:
        partition, row = info["mono"] >> 33, info["mono"] & _MASK33
    elif info.get("row") is not None and info.get("partition") is not None:
        partition, row = info["partition"], info["row"]
    elif info.get("order"):
        decoded = enc.describe_order(bytes.fromhex(info["order"]))
        if decoded is not None:
            index, path, _, mono = decoded
            src = next((s for s in sources.values() if s.index == index), src)
            if mono >> 33 < 1 << 20:  # batch: a row id (streaming numbers are counters)
                partition, row = mono >> 33, mono & _MASK33
    topic = src.topic if src is not None else info.get("topic") or "?"
    line = None
    if src is not None and partition is not None and row is not None:
        try:
            path, line = _find_line(spark, src, partition, row)
        except Exception as err:  # locating is best effort; the failure is what matters
            log.debug("could not locate the failed record: %s", err)
    if path is None:
        return f"{topic} (file unknown)", None
    shown = local_path(path)
    return (f"{topic}: {shown} line {line}" if line else f"{topic}: {shown}"), line


def _find_line(
    spark: SparkSession, src: SourceInfo, partition: int, row: int
) -> tuple[str | None, int | None]:
    """Re-scan the source (same files, same splits) to turn (partition, row) into
    (file, line)."""
    scan = spark.read.text(list(src.paths)).select(
        F.spark_partition_id().alias("p"),
        F.monotonically_increasing_id().alias("m"),
        F.col("_metadata.file_path").alias("f"),
        F.col("_metadata.file_block_start").alias("b"),
    )
    target = (partition << 33) + row
    hit = scan.where((F.col("p") == partition) & (F.col("m") == target)).select("f", "b").first()
    if hit is None:
        return None, None
    before = scan.where(
        (F.col("f") == hit["f"])
        & ((F.col("b") < hit["b"]) | ((F.col("b") == hit["b"]) & (F.col("m") < target)))
    ).count()
    return hit["f"], before + 1


# -- progress -----------------------------------------------------------------------------


class _ProgressReporter:
    """Polls Spark's status tracker and reports the running stage."""

    def __init__(
        self, spark: SparkSession, callback: Callable[[Progress], None], start: float
    ) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.callback = callback
        self.start_time = start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rstreams-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                detail = self._detail()
            except Exception:  # the context is stopping
                return
            self.callback(
                Progress(0, 0, 0, None, time.monotonic() - self.start_time, detail=detail)
            )

    def _detail(self) -> str:
        parts = []
        for sid in sorted(self.tracker.getActiveStageIds()):
            info = self.tracker.getStageInfo(sid)
            if info is None:
                continue
            name = re.sub(r" at .*$", "", info.name)
            parts.append(f"stage {sid} ({name}): {info.numCompletedTasks}/{info.numTasks} tasks")
        return "; ".join(parts) or "Spark: waiting"
