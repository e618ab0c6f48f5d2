"""What a run can be told, in one place: the options as types and one :class:`RunConfig`.

`rstreams.run`, the ``rstreams run`` command, the durable runtime's Supervisor and the
Spark runner all take a :class:`RunConfig` (or build one from their keyword arguments),
so every option has one name, one default and one check.

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

import attrs

from rstreams.errors import ConfigError

OnError = Literal["fail", "skip", "dead-letter"]
Guarantee = Literal["exactly-once", "at-least-once"]
StateBackend = Literal["rocksdb", "memory"]
Backend = Literal["embedded", "spark"]

#: The allowed values, in the order help texts list them (argparse ``choices``).
ON_ERROR: tuple[str, ...] = get_args(OnError)
GUARANTEES: tuple[str, ...] = get_args(Guarantee)
STATE_BACKENDS: tuple[str, ...] = get_args(StateBackend)
BACKENDS: tuple[str, ...] = get_args(Backend)

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


def check_choice(option: str, value: object, allowed: tuple[str, ...]) -> None:
    """Refuse ``value`` for ``option`` unless it is one of ``allowed``, naming them."""
    if value not in allowed:
        raise ConfigError(f"{option} must be one of {', '.join(allowed)}; got {value!r}")


def default_workers() -> int:
    """Worker processes of the durable runtime when none are asked for: one per core."""
    return os.cpu_count() or 1


@attrs.frozen(kw_only=True)
class RunConfig:
    """Every option of a run, with the one default each has.

    Attributes:
        backend: ``"embedded"`` (default) or ``"spark"``.
        on_error: what a record a user function throws on does: ``"fail"`` (default;
            stop naming step, queue and offset), ``"skip"``, or ``"dead-letter"``.
        chunk_lines: lines read from an input file at a time.
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
        worker_args: more command-line arguments for each worker process.
        max_restarts: restarts of dead workers in a row without a commit before the run
            gives up (0: never restart).
        allow_topology_change: run even when the topology changed in a way that loses
            or misreads the job's state.
        master: Spark master URL (Spark only).
        metrics_port: serve Prometheus metrics on 127.0.0.1 at this port (0: any free
            port); used by the command line.
        live: show the live dashboard instead of the progress bar; used by the
            command line.
    """

    backend: Backend = "embedded"
    on_error: OnError = "fail"
    chunk_lines: int = 20_000
    workers: int | None = None
    data_dir: str | None = attrs.field(default=None, converter=attrs.converters.optional(os.fspath))
    pipeline: str | None = attrs.field(default=None, converter=attrs.converters.optional(os.fspath))
    fresh: bool = False
    follow: bool = False
    guarantee: Guarantee = "exactly-once"
    state: StateBackend = "rocksdb"
    worker_args: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    max_restarts: int = 5
    allow_topology_change: bool = False
    master: str | None = None
    metrics_port: int | None = None
    live: bool = False

    def __attrs_post_init__(self) -> None:
        check_choice("backend", self.backend, BACKENDS)
        check_choice("on_error", self.on_error, ON_ERROR)
        check_choice("guarantee", self.guarantee, GUARANTEES)
        check_choice("state", self.state, STATE_BACKENDS)
        # Named as the command line spells them: most runs start there.
        if self.chunk_lines < 1:
            raise ConfigError(f"chunk_lines must be >= 1; got {self.chunk_lines}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--workers must be >= 1; got {self.workers}")
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0; got {self.max_restarts}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(
                f"--metrics-port must be 0..65535 (0: any free port); got {self.metrics_port}"
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
