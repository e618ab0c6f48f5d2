"""A worker process takes its configuration as typed JSON (a WorkerLaunch), not argv:
a bad one stops it with one line, and a run's worker_args reach it."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rstreams.config import RunConfig
from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from rstreams.runtime.engine.coordination.worker import EXIT_FATAL

PIPELINE = """
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("up")
    b.source("lines").map(str.upper).sink("out")
    return b
"""


def start_worker(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams.runtime.engine.coordination.workerprocess", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def exit_report(stderr: str) -> dict:
    """The worker's one line of output: its exit report (the supervisor reads it)."""
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith("rstreams worker exit: "), stderr
    return json.loads(stderr.removeprefix("rstreams worker exit: "))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON: Expecting value"),
        (
            '{"config": {"pipeline": "p.py", "on_error": "ignore"}, "job_dir": "j"}',
            "on_error must be one of fail, skip, dead-letter; got 'ignore'",
        ),
        (
            '{"config": {"pipeline": "p.py", "worker": {"rebalance_interval": "soon"}}, '
            '"job_dir": "j"}',
            "rebalance_interval must be float; got 'soon'",
        ),
        (None, "No such file or directory"),
    ],
)
def test_a_worker_given_a_bad_config_file_fails_with_one_line(tmp_path, content, message):
    path = tmp_path / "worker.json"
    if content is not None:
        path.write_text(content)
    r = start_worker(str(path))
    assert r.returncode == EXIT_FATAL, r.stderr
    report = exit_report(r.stderr)
    assert report["error"] == "ConfigError"
    assert report["message"].startswith(f"worker config {str(path)!r}: ")
    assert message in report["message"]
    assert not (tmp_path / "j").exists()


def test_a_worker_reads_its_config_from_stdin(tmp_path):
    r = start_worker("-", stdin='{"config": {}, "job_dir": "j"}')
    assert r.returncode == EXIT_FATAL
    assert exit_report(r.stderr) == {
        "exit_code": EXIT_FATAL,
        "error": "ConfigError",
        "message": "worker config standard input: config.pipeline is missing: the worker "
        "has no pipeline to run",
        "stopped_on": None,
    }


@pytest.mark.slow
def test_worker_args_reach_the_worker(tmp_path, caplog):
    pipeline = tmp_path / "up.py"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    lines = tmp_path / "in.txt"
    lines.write_text("a\nb\n")
    config = RunConfig(
        workers=1,
        data_dir=tmp_path / "data",
        worker_args=["--commit-interval", "0.25", "--allocation", "consistent_hash"],
    )
    caplog.set_level(logging.INFO, logger="rstreams")  # workers then log at INFO too
    cmdlines: list[list[str]] = []

    def progress(status: dict) -> None:
        for p in list(sup.procs.values()):
            with contextlib.suppress(OSError):  # (it ended)
                cmdlines.append(Path(f"/proc/{p.pid}/cmdline").read_text().split("\0")[:-1])

    topology = load_topology(str(pipeline))
    sup = Supervisor(str(pipeline), topology, {"lines": str(lines)}, config, progress=progress)
    try:
        sup.run()
        assert sup.tables()["out"] == {None: "B"}
    finally:
        sup.close()
    log = (tmp_path / "data" / "up" / "logs" / "worker-0.log").read_text()
    assert "commit_interval=0.25" in log, log
    assert "allocation='consistent_hash'" in log, log
    # Nothing of the configuration travels as an argument: it came on the worker's stdin.
    assert cmdlines, "no worker seen"
    assert all(
        c[1:] == ["-m", "rstreams.runtime.engine.coordination.workerprocess", "-"] for c in cmdlines
    ), cmdlines
