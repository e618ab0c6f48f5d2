"""Fault injection for crash tests: ``RSTREAMS_FAULTS="point:probability,..."``.

A worker started with the variable kills itself with SIGKILL when it passes a named
point and a random draw falls under the point's probability. Points: ``commit-start``,
``txn-written`` (after the commit point, before anything is applied),
``txn-applying`` (between two appends of a transaction), ``restore``. Unset (always, in
production), :func:`maybe_crash` costs one dict lookup.
"""

from __future__ import annotations

import os
import random
import signal

_POINTS: dict[str, float] = {}
for _item in filter(None, os.environ.get("RSTREAMS_FAULTS", "").split(",")):
    _name, _, _prob = _item.partition(":")
    _POINTS[_name.strip()] = float(_prob or 1.0)


def maybe_crash(point: str) -> None:
    p = _POINTS.get(point)
    if p is not None and random.random() < p:
        os.kill(os.getpid(), signal.SIGKILL)
