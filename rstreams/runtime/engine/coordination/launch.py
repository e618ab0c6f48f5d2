"""What a worker process of the durable runtime is told when it starts.

The supervisor writes a :class:`WorkerLaunch` as JSON on the worker's standard input
(its one argument is ``-``); a worker started by hand reads it from a file named by that
argument. Never on the command line, where every user of the machine can read it (a
broker password: ``--broker redis://user:PASSWORD@...``). The worker reads it with the
checks the run's options were built with: a bad value is refused naming the option.

    >>> from rstreams.config import RunConfig
    >>> launch = WorkerLaunch(
    ...     config=RunConfig(pipeline="wc.py", worker_args=["--commit-interval", "0.2"]),
    ...     job_dir="jobs/wc",
    ...     member="w0-1",
    ... )
    >>> again = WorkerLaunch.from_text(launch.to_text())
    >>> again == launch, again.config.worker_config().commit_interval
    (True, 0.2)
    >>> WorkerLaunch.from_text('{"config": {"on_error": "ignore"}, "job_dir": "j"}')
    Traceback (most recent call last):
    ...
    rstreams.errors.ConfigError: on_error must be one of fail, skip, dead-letter; got 'ignore'
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Literal

import attrs

from rstreams.config import RunConfig
from rstreams.errors import ConfigError
from rstreams.options import from_json, to_json

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


@attrs.frozen(kw_only=True)
class WorkerLaunch:
    """A worker's configuration: the run's options and where the worker stands."""

    #: The run's options; ``pipeline`` names the pipeline file the worker loads, and
    #: :meth:`RunConfig.worker_config` is the worker's own timing and allocation.
    config: RunConfig
    #: The job's directory (``DATA_DIR/JOB``): its log, offsets, state and groups.
    job_dir: str
    #: The worker's member id in the job's group (None: one of its own).
    member: str | None = None
    #: The supervisor's pid: the worker stops when that process is gone.
    parent_pid: int | None = None
    log_level: LogLevel = "WARNING"

    def __attrs_post_init__(self) -> None:
        if self.config.pipeline is None:
            raise ConfigError("config.pipeline is missing: the worker has no pipeline to run")

    def to_text(self) -> str:
        return to_json(self)

    @classmethod
    def from_text(cls, text: str) -> WorkerLaunch:
        """Read :meth:`to_text`'s JSON, checking every value as the run's options are."""
        launch: WorkerLaunch = from_json(cls, text)
        return launch

    @classmethod
    def read(cls, source: str) -> WorkerLaunch:
        """From the file ``source``, or standard input for ``-``; a ConfigError names
        where it came from."""
        where = "standard input" if source == "-" else repr(source)
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text("utf-8")
            return cls.from_text(text)
        except OSError as e:
            raise ConfigError(f"worker config {where}: {e.strerror or e}") from None
        except (ConfigError, UnicodeDecodeError) as e:
            raise ConfigError(f"worker config {where}: {e}") from None

    def send(self, proc: subprocess.Popen[bytes]) -> None:
        """Write this to a worker started with ``stdin=PIPE`` and argument ``-``."""
        assert proc.stdin is not None
        try:
            proc.stdin.write(self.to_text().encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at once; the supervisor's look at its exit says how


def log_level_of(logger: logging.Logger) -> LogLevel:
    """The level a worker logs at for a process whose ``logger`` logs as given: more
    when it says more, never less than warnings (the worker logs are for after)."""
    level = logger.getEffectiveLevel()
    return "DEBUG" if level <= logging.DEBUG else "INFO" if level <= logging.INFO else "WARNING"
