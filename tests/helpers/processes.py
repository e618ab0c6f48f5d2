"""Finding the processes a run started, by a mark in their environment: a test runs
``rstreams`` with ``marked_env(mark)`` and then checks with ``assert_nothing_left(mark)``
that no process of the run (JVM, Python daemon or worker) survives it."""

from __future__ import annotations

import os
import time


def marked_env(mark: str) -> dict[str, str]:
    """This environment plus a mark every child process inherits."""
    return {**os.environ, "RSTREAMS_TEST_MARK": mark}


def marked_processes(mark: str) -> list[str]:
    """Command lines of live processes whose environment carries ``mark``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"RSTREAMS_TEST_MARK={mark}".encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found.append(f"{pid}: " + f.read().replace(b"\0", b" ").decode()[:200])
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def assert_nothing_left(mark: str, grace: float = 10.0) -> None:
    """No process of the run survives it (daemons get ``grace`` seconds to see their
    JVM gone)."""
    deadline = time.monotonic() + grace
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left behind: {left}"
