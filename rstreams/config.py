"""What a run can be told, in one place: the options as types and one tree of them.

The tree is :class:`RunConfig` (the run's own options) with its sections::

    RunConfig            backend, on_error, workers, data_dir, guarantee, state, broker...
    +-- on_spark: SparkConfig   conf, streaming, checkpoint... (--backend spark)
    +-- worker: WorkerConfig    session, rebalance and commit timing, batch sizes...

`rstreams.run`, the ``rstreams run`` command, the durable runtime's Supervisor and its
workers (their launch carries the whole tree as JSON) and the Spark runner all take it
(or build it from their keyword arguments), so every option has one name, one default
and one check. Each option is declared once (:func:`rstreams.options.option`), with its
flag and help text: ``rstreams run``'s arguments are generated from the declarations of
the whole tree (:func:`rstreams.options.tree`), its values become a tree with
:func:`rstreams.options.from_args`, and the CLI reference is generated from that parser.
The in-process engine's :class:`~rstreams.runtime.engine.operators.context.EngineConfig` is
built from the tree (``EngineConfig.of``) and checks its choices with the same types.

    >>> from rstreams.config import RunConfig
    >>> c = RunConfig(workers=2, data_dir="jobs")
    >>> c.guarantee, c.state, c.on_error
    ('exactly-once', 'rocksdb', 'fail')
    >>> c.replace(on_error="skip").on_error
    'skip'
    >>> RunConfig(on_error="ignore")
    Traceback (most recent call last):
    ...
    rstreams.errors.ConfigError: on_error must be one of fail, skip, dead-letter; got 'ignore'
"""

from __future__ import annotations

import os
from typing import Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

import attrs

from rstreams.errors import ConfigError
from rstreams.options import above, at_least, option, parse_flags, within

OnError = Literal["fail", "skip", "dead-letter"]
Guarantee = Literal["exactly-once", "at-least-once"]
StateBackend = Literal["rocksdb", "memory"]
Backend = Literal["embedded", "spark"]
#: How a job's consumer group splits its tasks among the workers (RocketMQ strategies).
Allocation = Literal["averagely", "averagely_by_circle", "consistent_hash"]

#: The allowed values, in the order help texts list them (argparse ``choices``).
ON_ERROR: tuple[str, ...] = get_args(OnError)
GUARANTEES: tuple[str, ...] = get_args(Guarantee)
STATE_BACKENDS: tuple[str, ...] = get_args(StateBackend)
BACKENDS: tuple[str, ...] = get_args(Backend)
ALLOCATIONS: tuple[str, ...] = get_args(Allocation)

#: Where the durable runtime keeps its jobs unless told otherwise.
DEFAULT_DATA_DIR = ".rstreams"

#: The in-process engine (the test driver, ``run`` without a data dir) keeps nothing
#: once the process ends: exactly-once transactions and RocksDB would protect nothing
#: there, so it runs at-least-once on memory stores. Everything durable uses
#: RunConfig's defaults (exactly-once, RocksDB).
IN_PROCESS_GUARANTEE: Guarantee = "at-least-once"
IN_PROCESS_STATE: StateBackend = "memory"


def dead_letter_topic(job_id: str) -> str:
    """The topic records a user function failed on go to with ``on_error="dead-letter"``.

    >>> dead_letter_topic("wordcount")
    'wordcount-dead-letter'
    """
    return f"{job_id}-dead-letter"


#: The URL schemes ``--broker`` takes: Redis, and Redis over TLS.
BROKER_SCHEMES = ("redis", "rediss")


def redact_url(url: str | None) -> str:
    """``url`` with its password (if any) replaced, for reprs, logs and errors.

    >>> redact_url("redis://app:s3cret@db:6379/0")
    "'redis://app:***@db:6379/0'"
    >>> redact_url(None)
    'None'
    """
    if url is None:
        return "None"
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return repr(url)
        user = parts.username or ""
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return repr(urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}")))
    except ValueError:
        return "'<a broker URL>'"


def _broker_url(value: str) -> str | None:
    scheme = value.partition("://")[0]
    if scheme in BROKER_SCHEMES and value != f"{scheme}://":
        return None
    return "must be redis://[USER:PASSWORD@]HOST[:PORT][/DB] (rediss:// for TLS)"


def _broker_check(value: str) -> str | None:
    what = _broker_url(value)
    # (the value itself may hold a password: errors never show it)
    if what is not None:
        raise ConfigError(f"--broker {what}; got {redact_url(value)}")
    return None


def default_workers() -> int:
    """Worker processes of the durable runtime when none are asked for: one per core."""
    return os.cpu_count() or 1


@attrs.frozen
class WorkerConfig:
    """Timing and sizing of a worker of the durable runtime. Defaults suit a small machine.

    The options with a flag can be given as :attr:`RunConfig.worker_args`;
    ``--allocation`` and ``--rebalance-interval`` are options of ``rstreams run`` too.

    >>> WorkerConfig(rebalance_interval=0.5)
    Traceback (most recent call last):
    ...
    rstreams.errors.ConfigError: rebalance_interval must be >= 1 s; got 0.5
    """

    session_timeout: float = option(
        5.0,
        flag="--session-timeout",
        metavar="S",
        help="seconds without a heartbeat after which a worker counts as dead",
        check=above(0),
    )
    heartbeat_interval: float = 0.5
    rebalance_interval: float = option(
        20.0,
        flag="--rebalance-interval",
        metavar="S",
        help="seconds between periodic rebalances (min 1; membership changes act at once)",
        check=at_least(1, " s"),
    )
    commit_interval: float = option(
        1.0, flag="--commit-interval", metavar="S", help="seconds between commits", check=above(0)
    )
    cache_records: int = 5_000
    pull_batch: int = 5_000
    pull_interval: float = 0.1
    batch_size: int = 5_000
    idle_sleep: float = 0.01
    #: Pull on a background thread rather than in the worker loop. Off: with CPython's
    #: GIL a pulling thread does not run beside processing, it takes turns with it, and
    #: the hand-overs cost more than they save (about 5% of a word count).
    agent_thread: bool = False
    #: How often a worker purges consumed shuffle records, compacts the changelogs of its
    #: tasks and applies retention.
    maintenance_interval: float = option(
        30.0,
        flag="--maintenance-interval",
        metavar="S",
        help="seconds between purges of consumed shuffle records, changelog compactions "
        "and retention",
        check=above(0),
    )
    #: A changelog queue is compacted once it holds this many records more than twice
    #: its store's keys.
    compact_min_records: int = 10_000
    allocation: Allocation = option(
        "averagely",
        flag="--allocation",
        help="how the group splits tasks among workers (RocketMQ strategies; default averagely)",
    )


def _conf_items(value: Any) -> tuple[str, ...]:
    """Spark settings as ``KEY=VALUE`` items: from a dict (Python) or items (the
    command line's repeated ``--conf``)."""
    if isinstance(value, dict):
        return tuple(f"{k}={v}" for k, v in value.items())
    return tuple(value)


def _conf_check(items: tuple[str, ...]) -> str | None:
    bad = [i for i in items if not i.partition("=")[0].strip() or "=" not in i]
    return f"expects KEY=VALUE items; {bad[0]!r} is not one" if bad else None


@attrs.frozen(kw_only=True)
class SparkConfig:
    """The options of a run on Spark (``backend="spark"``), a section of
    :class:`RunConfig`; :func:`rstreams.runtime.spark.run_spark` takes them from there
    (or as its keywords when no config is given).

    >>> s = SparkConfig(conf={"spark.sql.shuffle.partitions": "4"}, streaming=True)
    >>> s.conf, s.conf_dict()
    (('spark.sql.shuffle.partitions=4',), {'spark.sql.shuffle.partitions': '4'})
    >>> SparkConfig(conf=["nokey"])
    Traceback (most recent call last):
    ...
    rstreams.errors.ConfigError: --conf expects KEY=VALUE items; 'nokey' is not one; got ('nokey',)
    """

    conf: tuple[str, ...] = option(
        (),
        flag="--conf",
        metavar="KEY=VALUE",
        help="a Spark setting with --backend spark, as spark-submit's --conf (repeatable), "
        "e.g. spark.pyspark.python=PATH or spark.archives=env.tar.gz#environment",
        check=_conf_check,
        errors_say_flag=True,
        converter=_conf_items,
    )
    streaming: bool = option(
        False,
        flag="--streaming",
        help="with --backend spark: Structured Streaming over the input directory "
        "(RocksDB state; a run with the same checkpoint continues the counts)",
    )
    checkpoint: str | None = option(
        None,
        flag="--checkpoint",
        metavar="DIR",
        help="streaming checkpoint (default: <--data-dir>/<job-id>/spark-checkpoint)",
        converter=attrs.converters.optional(os.fspath),
    )
    #: Streaming: process what is there and stop (``availableNow``); False keeps
    #: running until interrupted.
    trigger_once: bool = option(True)
    #: Return the tables in ``RunResult.tables`` (False for outputs too big for the
    #: driver: the executors write them).
    collect: bool = option(True)
    #: Make ``F.lower()``/``F.upper()`` equal to Python's for the few characters whose
    #: case mapping Spark's (newer) Unicode tables change.
    exact_unicode: bool = option(True)

    def conf_dict(self) -> dict[str, str]:
        """:attr:`conf` as Spark takes it."""
        pairs = (item.partition("=") for item in self.conf)
        return {key.strip(): value for key, _, value in pairs}


@attrs.frozen(kw_only=True)
class RunConfig:
    """Every option of a run, with the one default each has.

    Attributes:
        backend: ``"embedded"`` (default) or ``"spark"``.
        on_error: what a record a user function throws on does: ``"fail"`` (default;
            stop naming step, queue and offset), ``"skip"``, or ``"dead-letter"``.
        chunk_lines: lines read from an input file at a time.
        max_line_bytes: the longest input line allowed (``--max-line-bytes``).
        workers: worker processes of the durable runtime; None: one per core for the
            durable runtime, or, without ``data_dir`` in :func:`rstreams.run`, this
            process on memory queues.
        data_dir: where the durable runtime keeps its jobs (log, offsets, state); the
            command line's default is ``.rstreams``.
        pipeline: path of the pipeline file, which the durable runtime's worker
            processes load.
        fresh: forget what earlier runs of the job left in ``data_dir``.
        follow: keep reading what is appended to the inputs until interrupted.
        guarantee: ``"exactly-once"`` (default; transactional commits) or
            ``"at-least-once"`` (faster; after a worker failure, records can be counted
            more than once).
        state: ``"rocksdb"`` (default) or ``"memory"`` state stores.
        worker_args: more options for each worker process as command-line flags of
            :class:`WorkerConfig`'s options (``["--commit-interval", "0.2"]``), applied
            over ``worker``.
        max_restarts: restarts of dead workers in a row without a commit before the run
            gives up (0: never restart).
        max_restart_backoff: the longest wait, in seconds, before a dead worker's
            replacement starts (the wait starts at 0.1 s and doubles with each restart
            in a row without a commit).
        allow_topology_change: run even when the topology changed in a way that loses
            or misreads the job's state.
        master: Spark master URL (Spark only).
        metrics_port: serve Prometheus metrics on 127.0.0.1 at this port (0: any free
            port); used by the command line.
        live: show the live dashboard instead of the progress bar; used by the
            command line.
        idle_timeout: seconds after which a source queue with no new record stops
            holding back event time after a shuffle (durable runtime; None: never).
        broker: the broker URL of the durable runtime (None: the file log under
            ``data_dir``); its password never shows in a repr.
        broker_password_file, broker_tls_ca, broker_tls_cert, broker_tls_key: the
            broker's password, read from a file, and its TLS files.
        join: start workers only, joining the job another run over ``broker`` started.
        in_process_commit_interval: seconds between commits of an in-process run.
        on_spark: the options of a Spark run (:class:`SparkConfig`).
        worker: timing and sizing of each worker process of the durable runtime.

    Each option is declared once, with its command-line flag, help text and check (see
    :mod:`rstreams.options`): ``rstreams run`` is generated from these declarations.
    """

    backend: Backend = option(
        "embedded",
        flag="--backend",
        help="embedded: rstreams' own runtime (durable, or --in-memory); spark: Apache Spark "
        "through PySpark (default: %(default)s)",
    )
    on_error: OnError = option(
        "fail",
        flag="--on-error",
        help="what to do with a record a user function throws on: stop the run (fail), "
        "skip it, or skip it and keep it (dead-letter: the durable runtime appends it to "
        "the topic <job-id>-dead-letter, read with `rstreams consume`; --in-memory and "
        "Spark runs print the dead letters on stderr, or write them to --dead-letters "
        "PATH) (default: %(default)s)",
    )
    chunk_lines: int = option(20_000, check=at_least(1))
    max_line_bytes: int = option(
        64 << 20,
        flag="--max-line-bytes",
        metavar="N",
        help="the longest input line allowed, in bytes: one line is one record, held whole "
        "in memory (and on Redis a record must fit in one value); a longer line stops the "
        "run naming the file and byte (default 64 MiB: %(default)s)",
        check=at_least(1),
        errors_say_flag=True,
    )
    workers: int | None = option(
        None,
        flag="--workers",
        metavar="N",
        help="worker processes of the embedded runtime (default: the number of cores)",
        check=at_least(1),
        errors_say_flag=True,
    )
    data_dir: str | None = option(
        None,
        flag="--data-dir",
        metavar="DIR",
        cli_default=DEFAULT_DATA_DIR,
        help="log, offsets and state of the embedded runtime; a job lives in DIR/<job-id> "
        "and a run resumes what an earlier one left (default ./.rstreams)",
        converter=attrs.converters.optional(os.fspath),
    )
    pipeline: str | None = option(None, converter=attrs.converters.optional(os.fspath))
    fresh: bool = option(
        False, flag="--fresh", help="start the job over: delete DIR/<job-id> first"
    )
    follow: bool = option(
        False,
        flag="--follow",
        help="keep reading lines appended to the input files until Ctrl-C, then report; an "
        "input truncated, rewritten or replaced meanwhile stops the run (exit 2)",
    )
    guarantee: Guarantee = option(
        "exactly-once",
        flag="--guarantee",
        help="processing guarantee of the embedded runtime (default: %(default)s). "
        "at-least-once is faster but, after a worker fails and is restarted, counts the "
        "records it processed since its last commit again: results may include duplicates "
        "(the run then ends with a warning saying how many restarts happened)",
    )
    state: StateBackend = option(
        "rocksdb",
        flag="--state",
        help="state stores of the embedded runtime (default: %(default)s)",
    )
    worker_args: tuple[str, ...] = option((), converter=tuple)
    max_restarts: int = option(
        5,
        flag="--max-restarts",
        metavar="N",
        help="durable runtime: restart a worker that dies (killed, or an unexpected error) "
        "with a backoff, and give up after N restarts in a row without progress (no "
        "commit); 0: never restart (default %(default)s)",
        check=at_least(0),
        errors_say_flag=True,
    )
    max_restart_backoff: float = option(
        5.0,
        flag="--max-restart-backoff",
        metavar="S",
        help="durable runtime: the longest wait before a dead worker's replacement starts "
        "(the wait starts at 0.1 s and doubles with each restart in a row without "
        "progress; default %(default)s)",
        check=above(0, " s"),
        errors_say_flag=True,
    )
    allow_topology_change: bool = option(
        False,
        flag="--allow-topology-change",
        help="run even if the pipeline changed since the job's last run in a way that "
        "loses or misreads its state (without it such a run refuses and shows the diff: "
        "see `rstreams diff`)",
    )
    master: str | None = option(
        None,
        flag="--master",
        metavar="URL",
        help="Spark master URL with --backend spark (default local[*], or spark-submit's)",
    )
    metrics_port: int | None = option(
        None,
        flag="--metrics-port",
        metavar="PORT",
        help="serve Prometheus metrics (/metrics) and /healthz on 127.0.0.1:PORT while the "
        "run goes on (0: a free port, printed); needs pip install 'rstreams[ops]'",
        check=within(0, 65535, " (0: any free port)"),
        errors_say_flag=True,
    )
    live: bool = option(
        False,
        flag="--live",
        help="show the dashboard of `rstreams top` on stderr while the run goes on "
        "(steps, workers, queues, state stores) instead of the progress bar",
    )
    idle_timeout: float | None = option(
        None,
        flag="--idle-timeout",
        metavar="S",
        help="durable runtime: a source queue with no new record for S seconds stops holding "
        "back event time (watermarks) after a shuffle, even where its input has records "
        "still to come (default: never). Input files need none: a queue that has read all "
        "the ingest gave it holds nothing back, and a file read to its end (for now, with "
        "--follow) holds nothing back at all, so a followed run closes its windows",
        check=at_least(0),
    )
    broker: str | None = option(
        None,
        flag="--broker",
        metavar="URL",
        help="durable runtime: keep the job's topics, offsets and group in this broker "
        "instead of the file log under --data-dir: redis://[USER:PASSWORD@]HOST[:PORT][/DB] "
        "(rediss:// for TLS); local state stays under --data-dir. With --backend spark: the "
        "server of the pipeline's RedisStream sources and sinks",
        check=_broker_check,
        show=redact_url,
    )
    broker_password_file: str | None = option(
        None,
        flag="--broker-password-file",
        metavar="PATH",
        help="with --broker: read the broker's password from this file (kept out of the URL, "
        "so out of `ps`)",
    )
    broker_tls_ca: str | None = option(
        None, flag="--broker-tls-ca", metavar="PATH", help="with rediss://: CA certificates"
    )
    broker_tls_cert: str | None = option(
        None,
        flag="--broker-tls-cert",
        metavar="PATH",
        help="with rediss://: this client's certificate",
    )
    broker_tls_key: str | None = option(
        None, flag="--broker-tls-key", metavar="PATH", help="with rediss://: its private key"
    )
    join: bool = option(
        False,
        flag="--join",
        help="with --broker: join the job another `rstreams run --broker ...` started (on "
        "this host or another): start workers only, which join its group; no input is read "
        "here. Ends when that run ends",
    )
    #: Nothing of an in-process run needs to be durable: a commit there only hands the
    #: tables their updates (and the progress its records out), and costs as much as
    #: the distinct keys changed since the last one, a quarter of a 20 MB word count's
    #: time at one a second; memory does not wait for it (consumed input is dropped
    #: after every chunk, and the cache budget commits early the tasks that hold the
    #: most). Hence ten seconds, where a durable worker commits every
    #: ``worker.commit_interval`` (what a crash would make it process again).
    in_process_commit_interval: float = option(10.0, check=at_least(0))
    on_spark: SparkConfig = attrs.field(factory=SparkConfig)
    worker: WorkerConfig = attrs.field(factory=WorkerConfig)

    def __attrs_post_init__(self) -> None:
        if self.worker_args:
            self.worker_config()  # (refuses worker_args the workers would refuse)
        if self.broker is None and (self.join or self.broker_options()):
            raise ConfigError("--join and the --broker-* options need --broker URL")

    @property
    def durable_data_dir(self) -> str:
        """Where the durable runtime keeps its jobs: :attr:`data_dir`, or the default."""
        return self.data_dir or DEFAULT_DATA_DIR

    def broker_options(self) -> dict[str, str]:
        """The ``--broker-*`` options given, by name without ``broker_``."""
        names = ("password_file", "tls_ca", "tls_cert", "tls_key")
        given = {n: getattr(self, f"broker_{n}") for n in names}
        return {n: v for n, v in given.items() if v is not None}

    def worker_config(self) -> WorkerConfig:
        """The workers' :class:`WorkerConfig`: :attr:`worker` with :attr:`worker_args`
        (flags of WorkerConfig's options) applied over it."""
        if not self.worker_args:
            return self.worker
        return attrs.evolve(
            self.worker, **parse_flags(WorkerConfig, self.worker_args, "worker_args")
        )

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes``, checked like a new one; unknown names are refused."""
        unknown = sorted(set(changes) - set(attrs.fields_dict(RunConfig)))
        if unknown:
            raise ConfigError(f"unknown run option(s) {unknown}")
        return attrs.evolve(self, **changes)

    @classmethod
    def of(cls, config: RunConfig | None = None, **options: Any) -> RunConfig:
        """``config`` (default: all defaults) with ``options`` given as keywords."""
        return (config or cls()).replace(**options) if options else config or cls()
