"""SIGINT and SIGTERM stop a run, whatever the process inherited.

A script that starts ``rstreams run ... &`` gives it SIGINT ignored (a non-interactive
shell does that to background jobs, and the disposition is inherited); Ctrl-C in a
terminal signals the whole process group, workers included. Either way the run stops as
on Ctrl-C: the workers commit and leave, a followed run exits 0 with what it committed,
a bounded run is interrupted (exit code 130 for SIGINT, 143 for SIGTERM: 128 + the
signal's number) and the next run finishes it exactly.
Real worker processes on the file log; every wait is for an observable state.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rstreams import interrupts
from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from tests.helpers.metrics import wait_for as wait

PIPELINE = """
import re
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("wc")
    (b.source("sentences", queues=2)
       .flatMap(lambda line: re.findall(r"\\w+", line))
       .keyBy(lambda w: w)
       .count()
       .sink("counts"))
    return b
"""


def counts(lines: list[str]) -> dict[str, int]:
    return dict(collections.Counter(w for line in lines for w in re.findall(r"\w+", line)))


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    return wait(what, check, timeout=180.0)


def ignore_stop_signals() -> None:
    """In the child before exec: what a shell gives a background job, and more."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def committed(data: Path) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, queue) -> (committed, end), as `rstreams offsets` shows them."""
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "offsets", "wc", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    rows = [line.split("\t") for line in r.stdout.splitlines()[1:]] if r.returncode == 0 else []
    return {(t, int(q)): (int(c), int(e)) for t, q, c, e, _ in rows}


def all_committed(data: Path, lines: int) -> bool:
    """``lines`` input lines, and everything downstream of them, are committed."""
    offsets = committed(data)
    source = sum(c for (t, _), (c, _) in offsets.items() if t == "sentences")
    return source >= lines and all(c == e for c, e in offsets.values())


def live_workers(data: Path) -> int:
    members = data / "wc" / "coordination" / "wc" / "members"
    return len(list(members.glob("*.json")))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "to"),
    [(signal.SIGINT, "supervisor"), (signal.SIGINT, "group"), (signal.SIGTERM, "group")],
    ids=["SIGINT-to-supervisor", "SIGINT-to-group", "SIGTERM-to-group"],
)
def test_a_followed_run_started_with_signals_ignored_stops_on_them(tmp_path, sig, to) -> None:
    """``to="group"`` is Ctrl-C (or ``kill -INT -PGID``): the workers are in the group
    too, and must not stop on their own and be restarted while the run goes on."""
    pipeline = tmp_path / "wc.py"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    src, out, data = tmp_path / "in.txt", tmp_path / "out.jsonl", tmp_path / "d"
    first = [f"a{i % 7} b{i % 11} c" for i in range(2_000)]
    src.write_text("\n".join(first) + "\n")
    p = subprocess.Popen(
        [sys.executable, "-m", "rstreams", "run", str(pipeline), "--input", str(src),
         "--output", str(out), "--data-dir", str(data), "--workers", "2", "--follow"],
        stderr=subprocess.PIPE, text=True,
        preexec_fn=ignore_stop_signals, start_new_session=True,  # its own process group
    )  # fmt: skip
    try:
        wait_for("two workers in the group", lambda: live_workers(data) == 2)
        wait_for("the first lines committed", lambda: all_committed(data, len(first)))
        more = [f"d{i % 5} c" for i in range(500)]
        with src.open("a") as f:
            f.write("\n".join(more) + "\n")
        wait_for("the appended lines committed", lambda: all_committed(data, len(first + more)))
        if to == "group":
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
        try:
            _, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run did not stop on {sig.name} in 120 s") from None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert "replacement" not in err, err  # no worker stopped behind the supervisor's back
    assert live_workers(data) == 0, "the workers must leave the group"
    table = {row["key"]: row["value"] for row in map(json.loads, out.read_text().splitlines())}
    assert table == counts(first + more)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_bounded_run_with_signals_ignored_is_interrupted_and_resumes_exactly(
    tmp_path, sig
) -> None:
    """The signal comes in the middle of ingest (ingest waits in the progress callback
    until both workers joined and work was committed): the run raises KeyboardInterrupt
    once its workers committed and left, and the next run over the same input is
    exact."""
    pipeline = tmp_path / "wc.py"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    lines = [f"w{i % 97} x{i % 13} common" for i in range(30_000)]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    topology = load_topology(str(pipeline))
    sent: list[dict] = []

    def signal_once_committed(status: dict) -> None:
        if sent:
            return
        # Both workers in the group (each has its handlers), and work committed.
        wait_for("two workers in the group", lambda: live_workers(tmp_path / "d") == 2)
        wait_for("a commit", lambda: sum(sup.broker.group_offsets("wc").values()))
        sent.append(status)
        os.kill(os.getpid(), sig)  # handled between two steps of the supervisor's loop

    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        sup = Supervisor(
            str(pipeline), topology, {"sentences": str(src)}, data_dir=tmp_path / "d",
            workers=2, chunk_lines=500, progress=signal_once_committed,
        )  # fmt: skip
        try:
            interrupts.reset()
            with pytest.raises(KeyboardInterrupt):
                sup.run()
            # Noted for the command's exit code: 130 for SIGINT, 143 for SIGTERM.
            assert interrupts.received() == sig
        finally:
            sup.close()
        # The handlers the run found are back.
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    assert sent and sent[0]["bytes_read"] < sent[0]["bytes_total"]
    # Stopped, not killed: every worker exited 0 on the supervisor's SIGTERM.
    assert [p.returncode for p in sup.procs.values()] == [0, 0]
    assert sup.spawned == 2
    again = Supervisor(
        str(pipeline), topology, {"sentences": str(src)}, data_dir=tmp_path / "d", workers=2
    )
    try:
        again.run()
        table = again.tables()["counts"]
    finally:
        again.close()
    assert table == counts(lines)
