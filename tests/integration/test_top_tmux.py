"""`rstreams top` against a real run: a 2-worker `rstreams run --follow` fed lines in the
background, and the dashboard drawn by `rstreams top` in a real terminal (a detached tmux
session on a private socket), read back with `tmux capture-pane`. And `rstreams run
--live` when stderr is not a terminal."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "data" / "corpus.txt"
WORDCOUNT = ROOT / "examples" / "wordcount.py"
JOB = "wordcount"


def rstreams_command() -> list[str]:
    """The venv's `rstreams` script (what a user runs), else this Python's module."""
    script = Path(sys.executable).with_name("rstreams")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rstreams"]


def wait_for(what: str, check, timeout: float = 60.0, every: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


class Feeder:
    """Appends lines of the corpus to a file, a chunk every tenth of a second, so that
    a --follow run keeps having work (and non-zero rates)."""

    def __init__(self, path: Path, lines_per_tick: int = 300) -> None:
        self.path = path
        self.lines = CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)
        self.per_tick = lines_per_tick
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        with self.path.open("a", encoding="utf-8") as f:
            while not self.stop.wait(0.1):
                chunk = [self.lines[(i + k) % len(self.lines)] for k in range(self.per_tick)]
                i += self.per_tick
                f.writelines(chunk)
                f.flush()


@pytest.fixture
def running_job(tmp_path: Path) -> Iterator[Path]:
    """A 2-worker word count under --follow on a growing input; yields its data dir."""
    data = tmp_path / "data"
    source = tmp_path / "input.txt"
    source.write_text(CORPUS.read_text(encoding="utf-8") * 3, encoding="utf-8")
    feeder = Feeder(source)
    log = (tmp_path / "run.log").open("w")
    run = subprocess.Popen(
        [*rstreams_command(), "run", str(WORDCOUNT), "--input", str(source), "--workers", "2",
         "--data-dir", str(data), "--follow", "-q"],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
    )  # fmt: skip
    feeder.thread.start()
    try:
        yield data
    finally:
        feeder.stop.set()
        run.send_signal(signal.SIGINT)  # a --follow run stops on Ctrl-C, its workers too
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()
        log.close()
        feeder.thread.join(5)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_top_in_tmux_shows_steps_workers_and_rates_of_a_live_run(running_job, tmp_path):
    stats = running_job / JOB / "coordination" / JOB / "stats"

    def two_workers_publishing() -> list[str]:
        members = []
        for f in stats.glob("worker-*.json"):
            try:
                doc = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if doc.get("processed"):
                members.append(doc["member"])
        return sorted(members) if len(members) == 2 else []

    members = wait_for("two workers publishing their statistics", two_workers_publishing)
    # (Python takes the terminal's size from COLUMNS and LINES when they are set; under
    # pytest the session's shell gets COLUMNS=80.)
    top = shlex.join(
        ["env", "-u", "COLUMNS", "-u", "LINES", *rstreams_command(), "top",
         "--data-dir", str(running_job), "--refresh", "0.5"]
    )  # fmt: skip
    tmux = Tmux()
    try:
        # (`; sleep` keeps the pane, and any error top printed, readable if it exits)
        tmux.start("-d", "-x", "160", "-y", "50", "-c", str(tmp_path), f"{top}; sleep 120")

        def pane() -> str:
            return tmux("capture-pane", "-p", "-t", "0").stdout

        last = [""]

        def dashboard_with_rates() -> str:
            text = last[0] = pane()
            rates = [int(n.replace(",", "")) for n in re.findall(r"\(([\d,]+)/s\)", text)]
            return text if "topology of wordcount" in text and any(rates) else ""

        try:
            text = wait_for("the dashboard with non-zero rates", dashboard_with_rates, timeout=90)
        except AssertionError as e:
            raise AssertionError(f"{e}; the pane shows:\n{last[0]}") from None
        print(text)  # (shown when the test fails, and with -s)
        assert f"job {JOB}  running" in text
        # The job's steps, in the tree, with records per second.
        flat = next(line for line in text.splitlines() if "sentences-flatMap-1 [flatMap]" in line)
        count = next(line for line in text.splitlines() if "sentences-count-3 [count]" in line)
        assert re.search(r"in [\d,]+ \([\d,]+/s\)", flat), flat
        assert re.search(r"in [\d,]+ \([\d,]+/s\)", count), count
        # Both workers: in the group, in the workers table, owning queues.
        assert f"2 members ({members[0]}, {members[1]})" in text
        for member in members:
            rows = [line for line in text.splitlines() if line.startswith(member + " ")]
            assert len(rows) == 1, text
            assert re.search(rf"^\S+\[\d+\]\s+{re.escape(member)}\s", text, re.M), text
        # Non-zero rates: the run's input, and at least one worker.
        header = re.search(r"records in [\d,]+ \(([\d,]+)/s\)", text)
        assert header and int(header.group(1).replace(",", "")) > 0, text
        worker_rates = [
            int(m.group(1).replace(",", ""))
            for member in members
            for m in re.finditer(rf"^{re.escape(member)}\s.*?\s([\d,]+)/s", text, re.M)
        ]
        assert any(worker_rates), text
        assert "wordcount-sentences-count-3-store" in text  # state store sizes
    finally:
        tmux.close()


class Tmux:
    """A tmux server of the test's own, set up so that it starts wherever the tests run:
    its socket in a new short directory (``-S``: the default one depends on TMUX_TMPDIR
    and must be private, and a socket's path is limited to about 100 bytes), a TERM it
    knows, not nested in a tmux the tests may run in, and no user configuration. A
    command that fails raises with tmux's output; a server that does not start is
    started once more with its log on (``-v``), and the message ends with that log."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rst-tmux-"))
        self.socket = self.dir / "socket"
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.env["TERM"] = "xterm-256color"

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        r = self._run(args)
        if r.returncode != 0:
            raise AssertionError(self._failed(args, r))
        return r

    def start(self, *args: str) -> None:
        """``new-session`` with ``args``: starts the server."""
        first = self._run(("new-session", *args))
        if first.returncode == 0:
            return
        message = self._failed(("new-session", *args), first)
        self.close()
        self.dir.mkdir()
        # -v: the server logs to tmux-server-<pid>.log in the client's working directory.
        again = self._run(("new-session", *args), "-v")
        logs = sorted(self.dir.glob("tmux-server-*.log"))
        tail = logs[-1].read_text(errors="replace").splitlines()[-30:] if logs else []
        raise AssertionError(
            f"{message}\nstarted again with -v, tmux exited {again.returncode}"
            + (f" ({(again.stderr + again.stdout).strip()})" if again.returncode else "")
            + ("; the end of its server log:\n" + "\n".join(tail) if tail else "; no server log")
        )

    def _run(self, args: tuple[str, ...], *flags: str) -> subprocess.CompletedProcess[str]:
        cmd = ["tmux", *flags, "-S", str(self.socket), "-f", "/dev/null", *args]
        try:
            return subprocess.run(
                cmd, capture_output=True, text=True, timeout=30, env=self.env, cwd=self.dir
            )
        except subprocess.TimeoutExpired:
            raise AssertionError(f"`{shlex.join(cmd)}` did not return in 30 s") from None

    def _failed(self, args: tuple[str, ...], r: subprocess.CompletedProcess[str]) -> str:
        said = (r.stderr + r.stdout).strip() or "nothing"
        return (
            f"`tmux -S {self.socket} {shlex.join(args)}` exited {r.returncode}; tmux said: "
            f"{said} (TERM={self.env['TERM']})"
        )

    def close(self) -> None:
        if self.socket.exists():
            subprocess.run(
                ["tmux", "-S", str(self.socket), "kill-server"],
                capture_output=True, timeout=30, env=self.env, cwd=self.dir,
            )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)


def test_run_live_without_a_terminal_prints_plain_lines(tmp_path):
    source = tmp_path / "input.txt"
    source.write_text(CORPUS.read_text(encoding="utf-8") * 2, encoding="utf-8")
    r = subprocess.run(
        [*rstreams_command(), "run", str(WORDCOUNT), "--input", str(source), "--workers", "2",
         "--data-dir", str(tmp_path / "data"), "--live", "--top", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    # One line per refresh (at least the one at the start), then the run's summary.
    assert lines[0].startswith(f"{JOB}"), r.stderr
    assert all(line.startswith(JOB) for line in lines[:-1]), r.stderr
    assert lines[-1].startswith("done: ")
    assert r.stdout.startswith("word-counts: top 1 of")


def test_run_live_refuses_what_it_can_not_watch(tmp_path):
    r = subprocess.run(
        [*rstreams_command(), "run", str(WORDCOUNT), "--input", str(CORPUS), "--in-memory",
         "--live"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and "--live shows the workers of the durable" in r.stderr
