"""How a worker tells its supervisor why it stopped: one tagged JSON line on its output.

A worker that stops on an error a restart would meet again, or on a signal, prints an
:class:`ExitReport` as its last line::

    rstreams worker exit: {"exit_code": 4, "error": "SerdeError", "message": "..."}

The supervisor reads each worker's output through a pipe (see the workerpool module),
so the report reaches it even when the worker's log file can not be written (a full
disk), and it rebuilds the run's error from the report's fields with
:func:`worker_error`: the same kind of rstreams error, with the same message.

>>> report = ExitReport(EXIT_FATAL, "ConfigError", "bad option")
>>> ExitReport.last_in(["INFO starting", report.line()], EXIT_FATAL) == report
True
>>> worker_error(EXIT_FATAL, report)
ConfigError('bad option')
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterable

import attrs

import rstreams.errors as errors
from rstreams.errors import ProcessingError, RStreamsError

#: Exit code of a worker stopped by a record that failed processing (not restarted).
EXIT_PROCESSING_ERROR = 3
#: Exit code of a worker stopped by an error that a restart would meet again: a full or
#: failing disk, a corrupt log, an unreadable changelog, a value its serde can not
#: write, a bad option... (not restarted; its report says which). An unexpected
#: exception (a bug, with its traceback) exits 1 and is restarted, as is a worker
#: killed by a signal.
EXIT_FATAL = 4
#: Exit code of a worker that refused its options (argparse's): not restarted either.
EXIT_USAGE = 2

#: How a report's line starts.
TAG = "rstreams worker exit: "


@attrs.frozen
class ExitReport:
    """Why a worker stopped: its exit code, and the error it stopped on (the name of
    its class in :mod:`rstreams.errors`, and its message) or the signal that stopped it."""

    exit_code: int
    error: str | None = None
    message: str = ""
    stopped_on: str | None = None

    @classmethod
    def of(cls, error: BaseException, exit_code: int) -> ExitReport:
        return cls(exit_code, type(error).__name__, str(error))

    def line(self) -> str:
        return TAG + json.dumps(attrs.asdict(self))

    def tell(self) -> int:
        """Print the report (the worker's last line) and return its exit code."""
        with contextlib.suppress(OSError):  # (no one to tell: the supervisor is gone)
            print(self.line(), file=sys.stderr, flush=True)
        return self.exit_code

    @classmethod
    def parse(cls, line: str) -> ExitReport | None:
        """The report ``line`` is, or None if it is none (or a damaged one)."""
        if not line.startswith(TAG):
            return None
        try:
            doc = json.loads(line[len(TAG) :])
            return cls(
                int(doc["exit_code"]),
                _str_or_none(doc.get("error")),
                str(doc.get("message") or ""),
                _str_or_none(doc.get("stopped_on")),
            )
        except (ValueError, TypeError, KeyError):
            return None

    @classmethod
    def last_in(cls, lines: Iterable[str], exit_code: int) -> ExitReport | None:
        """The last report in ``lines`` of a worker that exited with ``exit_code`` (an
        earlier worker of the same slot may have reported another end)."""
        found = None
        for line in lines:
            report = cls.parse(line)
            if report is not None and report.exit_code == exit_code:
                found = report
        return found


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def describe_exit(code: int) -> str:
    """``killed by SIGKILL`` or ``exit code 1``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def worker_error(code: int, report: ExitReport | None) -> RStreamsError:
    """The error a worker that exited with ``code`` stopped on, as the same kind of
    rstreams error where its report names one (a ConfigError stays one)."""
    msg = report.message.strip() if report is not None else ""
    if code == EXIT_PROCESSING_ERROR:
        return ProcessingError(msg or "a worker failed on a record")
    if report is None or not msg:
        return RStreamsError(msg or f"a worker stopped with {describe_exit(code)}")
    cls = getattr(errors, report.error or "", None)
    if (
        isinstance(cls, type)
        and issubclass(cls, RStreamsError)
        and not issubclass(cls, ProcessingError)
    ):
        try:
            return cls(msg)
        except TypeError:  # an error class that takes more than a message
            pass
    return RStreamsError(msg)  # e.g. a CorruptLogError: its message says what it is
