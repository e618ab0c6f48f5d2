"""Fault injection for crash and I/O-error tests: ``RSTREAMS_FAULTS="item,..."``.

Each item is ``point[:probability][:ERRNO][@after]``. A process started with the
variable acts when it passes a named point and a random draw falls under the point's
probability (default 1):

* without ``ERRNO`` it kills itself with SIGKILL (:func:`maybe_crash`);
* with ``ERRNO`` (``ENOSPC``, ``EIO``...) the write at that point raises
  ``OSError(ERRNO)`` instead of writing (:func:`maybe_fail`), as a full or failing
  disk does;
* ``@after`` lets the first ``after`` passes of this process through the point go by.

Crash points: ``commit-start``, ``txn-written`` (after the commit point, before
anything is applied), ``txn-applying`` (between two appends of a transaction),
``restore``. Write points (every write of the commit path): ``log-append`` (a frame of
any queue), ``txn-append`` (a transaction record), ``log-index`` (a segment's index),
``log-roll`` (a new segment), ``log-sync`` (fsync of a segment or directory),
``log-durable`` (a queue's durable point), ``offset-commit`` (a committed offset),
``store-write`` (a RocksDB write batch). Unset (always, in production), a point costs
one dict lookup.

    >>> set_faults("log-append:1:ENOSPC@2")
    >>> maybe_fail("log-append", "x.log"); maybe_fail("log-append", "x.log")
    >>> maybe_fail("log-append", "x.log")
    Traceback (most recent call last):
    ...
    OSError: [Errno 28] No space left on device (injected): 'x.log'
    >>> set_faults("")
"""

from __future__ import annotations

import errno
import os
import random
import signal

import attrs


@attrs.define
class _Fault:
    probability: float = 1.0
    errno: int | None = None  # None: a crash
    after: int = 0  # passes that go by first
    passes: int = 0


#: The faults of this process, by point (empty: none, as in production).
POINTS: dict[str, _Fault] = {}


def _parse(spec: str) -> dict[str, _Fault]:
    points: dict[str, _Fault] = {}
    for item in filter(None, (i.strip() for i in spec.split(","))):
        item, _, after = item.partition("@")
        name, *fields = item.split(":")
        fault = _Fault(after=int(after or 0))
        for f in fields:
            if f and f[0].isalpha():
                code = getattr(errno, f, None)
                if not isinstance(code, int):
                    raise ValueError(f"RSTREAMS_FAULTS: {f!r} is not an errno name (ENOSPC, EIO)")
                fault.errno = code
            elif f:
                fault.probability = float(f)
        points[name.strip()] = fault
    return points


def set_faults(spec: str) -> None:
    """Replace the faults of this process (the variable's syntax; "" for none)."""
    POINTS.clear()
    POINTS.update(_parse(spec))


set_faults(os.environ.get("RSTREAMS_FAULTS", ""))


def _fires(point: str, kind_error: bool) -> _Fault | None:
    f = POINTS.get(point)
    if f is None or (f.errno is not None) != kind_error:
        return None
    f.passes += 1
    if f.passes <= f.after or random.random() >= f.probability:
        return None
    return f


def maybe_crash(point: str) -> None:
    """SIGKILL this process at crash point ``point`` if told to."""
    if POINTS and _fires(point, False) is not None:
        os.kill(os.getpid(), signal.SIGKILL)


def maybe_fail(point: str, path: object = None) -> None:
    """Raise the OSError write point ``point`` (writing ``path``) is told to fail with."""
    if POINTS and (f := _fires(point, True)) is not None:
        assert f.errno is not None
        raise OSError(f.errno, f"{os.strerror(f.errno)} (injected)", str(path))
