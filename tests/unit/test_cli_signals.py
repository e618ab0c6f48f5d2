"""A command stopped by a signal exits 128 + the signal's number, as shells report it:
130 for Ctrl-C (SIGINT), 143 for SIGTERM (docs/cli.md, Exit codes).

In process: the command's function is replaced by one that signals the process, and the
handler ``main`` set turns the signal into KeyboardInterrupt there. The real commands,
with their workers, are stopped by a signal from outside in
tests/integration/test_chaos_cli.py and tests/integration/test_signals.py.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

import pytest

from rstreams import cli, interrupts

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="main() sets its signal handlers on the main thread only",
)


def run_describe(monkeypatch: pytest.MonkeyPatch, command: object) -> int:
    """``rstreams describe`` with its work replaced by ``command``."""
    monkeypatch.setattr(cli, "cmd_describe", command)
    return cli.main(["describe", str(WORDCOUNT)])


@pytest.mark.parametrize(
    ("sig", "code", "message"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "interrupted (SIGTERM)")],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_stop_signal_exits_128_plus_its_number(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sig: signal.Signals,
    code: int,
    message: str,
) -> None:
    def signalled(args: argparse.Namespace) -> int:
        signal.raise_signal(sig)  # main's handler raises KeyboardInterrupt here
        raise AssertionError(f"{sig.name} did not interrupt the command")

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert run_describe(monkeypatch, signalled) == code
    assert capsys.readouterr().err == f"rstreams: error: {message}\n"
    # The handlers main found are back (pytest's, not main's: no KeyboardInterrupt now).
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_plain_keyboard_interrupt_exits_130_whatever_stopped_the_command_before(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command starts afresh: a SIGTERM noted before (by an earlier ``main`` in the
    same process) does not make a later Ctrl-C that Python raised an exit 143."""

    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    interrupts.note(signal.SIGTERM)
    assert run_describe(monkeypatch, interrupted) == 130
    assert capsys.readouterr().err == "rstreams: error: interrupted\n"


def test_a_signal_noted_by_another_handler_gives_its_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The supervisor, a joining run and the Spark runner set handlers of their own while
    they run: they note the signal before the KeyboardInterrupt reaches ``main``."""

    def supervised(args: argparse.Namespace) -> int:
        interrupts.note(signal.SIGTERM)  # as Supervisor._on_stop_signal does
        raise KeyboardInterrupt  # as the supervisor's loop then does

    assert run_describe(monkeypatch, supervised) == 143
    assert capsys.readouterr().err == "rstreams: error: interrupted (SIGTERM)\n"
