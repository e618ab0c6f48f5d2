"""WorkerPool on real worker processes: an error a restart would meet again ends the
run with the worker's own error, a crash loop without progress gives up, a worker
stopped from outside is restarted and the warning says by what."""

from __future__ import annotations

import signal
import textwrap
import time
from pathlib import Path

import pytest

from rstreams.config import RunConfig
from rstreams.errors import ConfigError, PipelineFileError, RStreamsError
from rstreams.runtime.engine.coordination.workerpool import WorkerPool
from rstreams.runtime.layout import JobLayout

pytestmark = pytest.mark.fast  # in ./dev test --fast (see pyproject.toml's markers)

UPPER = """
    from rstreams import StreamBuilder

    def build():
        b = StreamBuilder("up")
        b.source("in").map(str.upper).sink("out")
        return b
"""


def pool(tmp_path: Path, body: str, **kw) -> WorkerPool:
    pipeline = tmp_path / "p.py"
    pipeline.write_text(textwrap.dedent(body))
    options = {"on_error": "fail", "max_restarts": 3, **kw}
    config = RunConfig(pipeline=str(pipeline), **options)
    return WorkerPool(config, JobLayout.of(tmp_path / "data", "up"), committed=dict)


def check_until(p: WorkerPool, done, what: str) -> None:
    """Call ``check`` until ``done()`` (it raises what the pool raises)."""
    deadline = time.monotonic() + 120
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited too long for {what}")
        p.check()
        time.sleep(0.02)


def test_an_error_a_restart_would_meet_again_ends_at_once_with_its_kind(tmp_path: Path) -> None:
    p = pool(tmp_path, "def build():\n    raise ValueError('no pipeline here')\n")
    try:
        p.start(2)
        with pytest.raises(PipelineFileError, match="no pipeline here") as info:
            check_until(p, lambda: False, "the error")
        assert "ValueError" in str(info.value)
        assert p.spawned == 2 and p.restarts == 0
        # Its output went to its log file too, the exit report last.
        # (the error is that of whichever of the two workers stopped first)
        layout = JobLayout.of(tmp_path / "data", "up")
        ends = [layout.worker_log(s).read_text().splitlines()[-1:] for s in (0, 1)]
        assert any(e and e[0].startswith("rstreams worker exit: ") for e in ends)
    finally:
        p.stop()


def test_options_a_worker_would_refuse_end_the_run_before_any_worker_starts(
    tmp_path: Path,
) -> None:
    # Workers get the run's typed config: a bad option is refused where it is declared.
    with pytest.raises(ConfigError, match="--no-such-option"):
        pool(tmp_path, UPPER, worker_args=["--no-such-option"])
    assert not JobLayout.of(tmp_path / "data", "up").logs.exists()


def test_a_crash_loop_without_progress_gives_up_with_the_last_lines(tmp_path: Path) -> None:
    body = """
        import os, signal
        print("about to die", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
    p = pool(tmp_path, body, max_restarts=2)
    try:
        p.start(1)
        with pytest.raises(RStreamsError) as info:
            check_until(p, lambda: False, "giving up")
        msg = str(info.value)
        assert "worker 0 killed by SIGKILL; giving up after 2 restart(s) in a row" in msg
        assert "--max-restarts 2" in msg and "worker-0.log" in msg and "about to die" in msg
        assert p.spawned == 3 and p.restarts == 2 and len(p.failures) == 3
        assert p.backoff == 0.4  # doubled after each restart
    finally:
        p.stop()


def test_the_restart_backoff_stops_doubling_at_its_cap(tmp_path: Path) -> None:
    body = """
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
    """
    p = pool(tmp_path, body, max_restarts=3, max_restart_backoff=0.15)
    try:
        p.start(1)
        with pytest.raises(RStreamsError, match="giving up after 3 restart"):
            check_until(p, lambda: False, "giving up")
        assert p.restarts == 3 and p.backoff == 0.15  # 0.1, then 0.15 (not 0.2, 0.4)
    finally:
        p.stop()


def test_a_worker_stopped_from_outside_is_replaced_and_named(tmp_path: Path, caplog) -> None:
    p = pool(tmp_path, UPPER)
    group = JobLayout.of(tmp_path / "data", "up").coordination

    def joined(member: str) -> bool:  # (its signal handlers are set by then)
        return member in group.listed_members()

    try:
        p.start(1)
        first = p.procs[0]
        check_until(p, lambda: joined("w0-1"), "a worker")
        first.send_signal(signal.SIGTERM)  # not the pool's: a restart
        check_until(p, lambda: joined("w0-2"), "the replacement")
        assert p.failures == ["exited 0 after a SIGTERM the supervisor did not send"]
        assert "starting a replacement" in caplog.text
        assert p.alive() == 1 and set(p.pids()) == {0}
        slot = p.add_worker()
        assert slot == 1 and p.spawned == 3
        p.remove_worker(slot)  # asked to leave: not replaced
        assert set(p.procs) == {0}
    finally:
        p.stop()
    assert all(proc.returncode == 0 for proc in p.procs.values())
