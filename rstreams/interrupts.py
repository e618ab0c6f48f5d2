"""Which stop signal interrupted the process, for the ``rstreams`` command's exit code.

The command exits 128 + the signal's number when SIGINT or SIGTERM stopped it, as a shell
reports a process a signal ended: 130 for Ctrl-C (SIGINT), 143 for SIGTERM. Every handler
that turns one of them into KeyboardInterrupt (the command's own, the supervisor's, a
joining run's, the Spark runner's) notes the signal here first; the command reads it when
the KeyboardInterrupt reaches it. A KeyboardInterrupt with no signal noted (Python's own
Ctrl-C handler) counts as SIGINT.
"""

from __future__ import annotations

import signal

#: The stop signal that arrived last since :func:`reset` (None: none did).
_received: int | None = None


def note(signum: int) -> None:
    """A handler of SIGINT or SIGTERM got ``signum``."""
    global _received
    _received = signum


def reset() -> None:
    """Forget the signal noted (each ``rstreams`` command starts afresh)."""
    global _received
    _received = None


def received() -> signal.Signals:
    """The stop signal noted last; SIGINT when none was (a plain KeyboardInterrupt)."""
    return signal.Signals(signal.SIGINT if _received is None else _received)


def exit_code() -> int:
    """128 + the number of :func:`received`: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(received())
