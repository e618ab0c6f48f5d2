"""The exit report: how a worker tells its supervisor why it stopped (a tagged JSON
line), and the error the supervisor rebuilds from it."""

from __future__ import annotations

import pytest

from rstreams.errors import ConfigError, PipelineFileError, ProcessingError, RStreamsError
from rstreams.runtime.engine.coordination.exitreport import (
    EXIT_FATAL,
    EXIT_PROCESSING_ERROR,
    TAG,
    ExitReport,
    describe_exit,
    worker_error,
)


def test_a_report_is_one_tagged_line_that_reads_back() -> None:
    report = ExitReport.of(ConfigError("bad\noption"), EXIT_FATAL)
    line = report.line()
    assert line.startswith(TAG) and "\n" not in line  # (a message of several lines too)
    assert ExitReport.parse(line) == report == ExitReport(EXIT_FATAL, "ConfigError", "bad\noption")
    stopped = ExitReport(0, stopped_on="SIGTERM")
    assert ExitReport.parse(stopped.line()) == stopped


@pytest.mark.parametrize(
    "line",
    ["", "INFO worker: started", TAG, TAG + "{", TAG + "[]", TAG + '{"error": "X"}'],
)
def test_other_lines_and_damaged_reports_are_no_report(line: str) -> None:
    assert ExitReport.parse(line) is None


def test_the_last_report_of_the_exit_code_is_taken() -> None:
    """A slot's output holds its earlier workers' lines too: the report that counts is
    the last one of a worker that exited with the code seen."""
    old = ExitReport(0, stopped_on="SIGINT")
    first, last = ExitReport(EXIT_FATAL, "SerdeError", "a"), ExitReport(EXIT_FATAL, None, "b")
    lines = [first.line(), "Traceback ...", old.line(), last.line(), "more output"]
    assert ExitReport.last_in(lines, EXIT_FATAL) == last
    assert ExitReport.last_in(lines, 0) == old
    assert ExitReport.last_in(lines, 1) is None


def test_tell_prints_the_line_and_returns_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert ExitReport(EXIT_PROCESSING_ERROR, "ProcessingError", "x").tell() == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert ExitReport.parse(line) == ExitReport(EXIT_PROCESSING_ERROR, "ProcessingError", "x")


def test_the_error_keeps_its_kind_and_message() -> None:
    err = worker_error(EXIT_FATAL, ExitReport(EXIT_FATAL, "PipelineFileError", "no build()"))
    assert type(err) is PipelineFileError and str(err) == "no build()"
    err = worker_error(EXIT_FATAL, ExitReport(EXIT_FATAL, "NotAnError", "it broke"))
    assert type(err) is RStreamsError and str(err) == "it broke"
    err = worker_error(EXIT_FATAL, ExitReport(EXIT_FATAL, "ValueError", "not ours"))
    assert type(err) is RStreamsError  # only rstreams errors are rebuilt as themselves
    # A processing error is one whatever its class, and says so without a report.
    err = worker_error(EXIT_PROCESSING_ERROR, None)
    assert type(err) is ProcessingError and "failed on a record" in str(err)
    err = worker_error(2, None)  # options refused: argparse's usage text, no report
    assert type(err) is RStreamsError and str(err) == "a worker stopped with exit code 2"


def test_describe_exit() -> None:
    assert describe_exit(-15) == "killed by SIGTERM"
    assert describe_exit(-200) == "killed by signal 200"
    assert describe_exit(4) == "exit code 4"
