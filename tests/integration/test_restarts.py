"""Restarts that fit the fault: a deterministic error ends the run at once, a killed
worker is restarted with a backoff, and a crash loop without progress gives up."""

from __future__ import annotations

import collections
import os
import re
import signal
import textwrap
import time
from pathlib import Path

import pytest

from rstreams.cli import main as cli_main
from rstreams.errors import ConfigError, ProcessingError, RStreamsError, SerdeError
from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.exitreport import ExitReport, describe_exit, worker_error
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from rstreams.runtime.engine.coordination.worker import EXIT_FATAL, EXIT_PROCESSING_ERROR


def write(tmp_path: Path, body: str, name: str = "p.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def supervisor(pipeline: Path, inputs: dict[str, str], tmp_path: Path, **kw) -> Supervisor:
    return Supervisor(
        str(pipeline), load_topology(str(pipeline)), inputs, data_dir=tmp_path / "data", **kw
    )


WORDS = """
    import re
    from rstreams import StreamBuilder

    def build():
        b = StreamBuilder("words")
        (b.source("lines").flatMap(lambda l: re.findall(r"\\w+", l.lower()))
          .keyBy(lambda w: w).count().toRStream().sink("counts"))
        return b
"""


def test_describe_exit():
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(1) == "exit code 1"


@pytest.mark.fast  # in ./dev test --fast (see pyproject.toml's markers)
def test_processing_error_ends_the_run_at_once_without_restarts(tmp_path, capsys):
    pipeline = write(
        tmp_path,
        """
        from rstreams import StreamBuilder

        def build():
            b = StreamBuilder("ints")
            b.source("in").map(int).sink("out")
            return b
        """,
    )
    data = tmp_path / "in.txt"
    data.write_text("1\n2\nx\n4\n")
    sup = supervisor(pipeline, {"in": str(data)}, tmp_path, workers=2)
    start = time.monotonic()
    try:
        with pytest.raises(ProcessingError, match=r"failed on the record .*'x'.*ValueError"):
            sup.run()
    finally:
        sup.close()
    assert sup.spawned == 2  # one per slot: no restart
    assert not sup.failures
    assert time.monotonic() - start < 30
    # Through the CLI: exit code 1 and the step's error.
    code = cli_main(
        ["run", str(pipeline), "--input", str(data), "--workers", "2", "--fresh",
         "--data-dir", str(tmp_path / "cli")]
    )  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "rstreams: error: step 'in-map-1' failed on the record at in[" in err
    assert "ValueError: invalid literal for int()" in err
    assert "giving up" not in err


UNSERIALIZABLE = """
    from rstreams import StreamBuilder

    def build():
        b = StreamBuilder("sets")
        (b.source("in").keyBy(lambda v: v)
          .aggregate(lambda: 0, lambda acc, v: {acc, v})  # a set: msgpack can't store it
          .toRStream().map(lambda s: sorted(map(str, s)), name="listed").sink("out"))
        return b
"""


def test_a_fatal_error_ends_the_run_at_once(tmp_path, capsys):
    """A value the store's serde can not write fails the same way on every restart: the
    worker exits EXIT_FATAL and the run ends with its error (not a ConfigError)."""
    pipeline = write(tmp_path, UNSERIALIZABLE)
    data = tmp_path / "in.txt"
    data.write_text("a\nb\n")
    sup = supervisor(pipeline, {"in": str(data)}, tmp_path, workers=2)
    try:
        with pytest.raises(RStreamsError, match=r"can not be stored in state") as info:
            sup.run()
    finally:
        sup.close()
    assert not isinstance(info.value, (ConfigError, ProcessingError))
    assert sup.spawned == 2
    assert "giving up" not in str(info.value)
    code = cli_main(
        ["run", str(pipeline), "--input", str(data), "--workers", "1", "--fresh",
         "--data-dir", str(tmp_path / "cli")]
    )  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "rstreams: error: " in err and "can not be stored in state" in err


def test_a_worker_error_keeps_its_kind():
    """The run's error is the kind the worker stopped on: a ConfigError stays one (exit
    code 2), other rstreams errors stay theirs, and the last message is the one taken.
    The worker's exit report (its last line, tagged JSON) says which."""

    def _worker_error(code: int, *reports: tuple[str | None, str]) -> RStreamsError:
        lines = ["INFO something", *(ExitReport(code, e, m).line() for e, m in reports)]
        return worker_error(code, ExitReport.last_in([*lines, "a traceback line"], code))

    err = _worker_error(EXIT_FATAL, ("RStreamsError", "old"), ("ConfigError", "bad option"))
    assert type(err) is ConfigError and str(err) == "bad option"
    err = _worker_error(EXIT_FATAL, ("SerdeError", "no\n  more\n"))
    assert type(err) is SerdeError and str(err) == "no\n  more"
    err = _worker_error(EXIT_FATAL, ("CorruptLogError", "corrupt log 'x'[0]"))
    assert type(err) is RStreamsError and str(err) == "corrupt log 'x'[0]"
    err = _worker_error(EXIT_FATAL)  # (no report: a traceback without it)
    assert type(err) is RStreamsError and "exit code 4" in str(err)
    err = _worker_error(EXIT_PROCESSING_ERROR, ("ProcessingError", "step 's' failed"))
    assert type(err) is ProcessingError and str(err) == "step 's' failed"


def test_killed_worker_is_restarted_and_the_result_is_exact(tmp_path):
    """Workers killed (SIGKILL) over and over while data flows: each is replaced and the
    table is exact. A kill comes only once the job committed something since the last
    replacement started, so that however slow the machine, every kill is a restart after
    progress (a crash loop without progress is the next test's)."""
    pipeline = write(tmp_path, WORDS)
    lines = [f"w{i % 97} x{i % 13} common" for i in range(150_000)]
    data = tmp_path / "in.txt"
    data.write_text("\n".join(lines) + "\n")
    kills = collections.Counter()
    # What the job had committed when the last replacement was started (or at the start).
    chaos_state: dict = {"spawned": 2, "committed": None}

    def committed() -> int:
        return sum(sup.broker.group_offsets("words").values())

    def chaos(status: dict) -> None:
        if chaos_state["committed"] is None or sup.spawned > chaos_state["spawned"]:
            chaos_state["spawned"] = sup.spawned  # a replacement started: progress anew
            chaos_state["committed"] = committed()
            return
        if kills["n"] >= 6 or committed() <= chaos_state["committed"]:
            return
        slot = kills["n"] % 2
        if sup.procs[slot].poll() is None and sup.spawned == 2 + kills["n"]:
            sup.kill_worker(slot, signal.SIGKILL)
            kills["n"] += 1

    sup = supervisor(
        pipeline, {"lines": str(data)}, tmp_path, workers=2, chunk_lines=500,
        max_ingest_rate=30_000, progress=chaos, max_restarts=3,
        worker_args=["--commit-interval", "0.2", "--session-timeout", "2"],
    )  # fmt: skip
    try:
        sup.run()
        table = sup.tables()["counts"]
    finally:
        sup.close()
    assert kills["n"] >= 3
    assert sup.spawned >= 2 + kills["n"]
    expected = collections.Counter(w for line in lines for w in re.findall(r"\w+", line.lower()))
    assert table == dict(expected)


def _worker_pids() -> list[int]:
    """This process's worker children (they run in sessions of their own)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # (a process that ended meanwhile)
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"rstreams.runtime.engine.coordination.worker" in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_restarts_under_at_least_once_end_with_a_warning_of_duplicates(tmp_path, caplog, guarantee):
    """A worker killed once the job committed something is replaced; at-least-once may
    then count records twice, and the run says so with the number of restarts (an
    over-count that exits 0 without a word looks exact). Exactly-once says nothing."""
    from rstreams.config import RunConfig
    from rstreams.runtime.engine.coordination.supervisor import run_durable
    from rstreams.runtime.engine.coordination.worker import open_broker

    pipeline = write(tmp_path, WORDS)
    data = tmp_path / "in.txt"
    data.write_text("".join(f"w{i % 31} common\n" for i in range(20_000)))
    killed: list[int] = []

    def kill_once(progress) -> None:
        if killed:
            return
        # Called first after one chunk: ingest waits (the run can not end) until a
        # worker committed, then one worker is killed.
        broker = open_broker(tmp_path / "data" / "words")
        try:
            deadline = time.monotonic() + 120
            while not sum(broker.group_offsets("words").values()):
                assert time.monotonic() < deadline, "the workers committed nothing in 120 s"
                time.sleep(0.05)
        finally:
            broker.close()
        pid = _worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    config = RunConfig(
        data_dir=str(tmp_path / "data"), workers=2, guarantee=guarantee, chunk_lines=500,
        worker_args=("--commit-interval", "0.2"),
    )  # fmt: skip
    with caplog.at_level("WARNING", logger="rstreams.supervisor"):
        result = run_durable(
            str(pipeline), load_topology(str(pipeline)), {"lines": str(data)}, config,
            progress=kill_once,
        )  # fmt: skip
    assert killed
    assert result.tables["counts"]["common"] >= 20_000
    warned = [r.getMessage() for r in caplog.records if "duplicates" in r.getMessage()]
    if guarantee == "exactly-once":
        assert warned == []
        assert result.tables["counts"]["common"] == 20_000
    else:
        assert warned == [
            "1 worker restart(s) during this --guarantee at-least-once run: the results may "
            "include duplicates (records processed again after a restart are counted again); "
            "use --guarantee exactly-once for exact results"
        ]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_worker_stopped_from_outside_the_run_is_replaced_and_the_warning_says_why(
    tmp_path, caplog, sig
):
    """A worker that exits 0 because something other than the supervisor signalled it
    (it commits and leaves, as when the supervisor asks) is replaced, and the warning
    names the signal instead of a bare exit code; the table is exact."""
    pipeline = write(tmp_path, WORDS)
    lines = [f"w{i % 31} common" for i in range(20_000)]
    data = tmp_path / "in.txt"
    data.write_text("\n".join(lines) + "\n")
    signalled: list[int] = []

    def outsider(status: dict) -> None:
        if signalled:
            return
        # Called first after one chunk: ingest waits (the run can not end) until the
        # worker committed, so it runs its loop and has its signal handlers.
        deadline = time.monotonic() + 120
        while not sum(sup.broker.group_offsets("words").values()):
            assert time.monotonic() < deadline, "the worker committed nothing in 120 s"
            time.sleep(0.05)
        sup.kill_worker(0, sig)
        signalled.append(sup.procs[0].pid)

    sup = supervisor(
        pipeline, {"lines": str(data)}, tmp_path, workers=1, chunk_lines=500,
        max_ingest_rate=10_000, progress=outsider,
        worker_args=["--commit-interval", "0.2"],
    )  # fmt: skip
    with caplog.at_level("WARNING", logger="rstreams.supervisor"):
        try:
            sup.run()
            table = sup.tables()["counts"]
        finally:
            sup.close()
    assert signalled and sup.spawned == 2
    name = signal.Signals(sig).name
    warned = [r.getMessage() for r in caplog.records if "replacement" in r.getMessage()]
    assert warned == [
        f"worker 0 exited 0 after a {name} the supervisor did not send; "
        "starting a replacement in 0.1s"
    ]
    expected = collections.Counter(w for line in lines for w in re.findall(r"\w+", line.lower()))
    assert table == dict(expected)


def test_a_crash_loop_without_progress_gives_up_after_max_restarts(tmp_path, monkeypatch):
    """Workers that die from SIGKILL before any commit: restarted with a doubling
    backoff, then the run gives up naming the exits and the worker's log."""
    pipeline = write(tmp_path, WORDS)
    data = tmp_path / "in.txt"
    data.write_text("a b\nc d\n")
    monkeypatch.setenv("RSTREAMS_FAULTS", "commit-start:1")  # dies at its first commit
    sup = supervisor(pipeline, {"lines": str(data)}, tmp_path, workers=1, max_restarts=3)
    start = time.monotonic()
    try:
        with pytest.raises(RStreamsError) as info:
            sup.run()
    finally:
        sup.close()
    elapsed = time.monotonic() - start
    msg = str(info.value)
    assert "giving up after 3 restart(s) in a row without progress" in msg
    assert msg.count("killed by SIGKILL") >= 4
    assert "--max-restarts 3" in msg and "worker-0.log" in msg
    assert sup.spawned == 4  # the first start and 3 restarts
    assert 0.1 + 0.2 + 0.4 <= elapsed < 60  # the backoff waited


def test_max_restarts_zero_never_restarts(tmp_path, monkeypatch):
    pipeline = write(tmp_path, WORDS)
    data = tmp_path / "in.txt"
    data.write_text("a b\n")
    monkeypatch.setenv("RSTREAMS_FAULTS", "commit-start:1")
    sup = supervisor(pipeline, {"lines": str(data)}, tmp_path, workers=1, max_restarts=0)
    try:
        with pytest.raises(RStreamsError, match="giving up after 0 restart"):
            sup.run()
    finally:
        sup.close()
    assert sup.spawned == 1


def test_negative_max_restarts_is_refused(tmp_path, capsys):
    pipeline = write(tmp_path, WORDS)
    data = tmp_path / "in.txt"
    data.write_text("a\n")
    code = cli_main(
        ["run", str(pipeline), "--input", str(data), "--max-restarts", "-1",
         "--data-dir", str(tmp_path / "d")]
    )  # fmt: skip
    assert code == 2
    assert "--max-restarts must be >= 0; got -1" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "d")
