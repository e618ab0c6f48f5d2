"""The engine's fault points (see :mod:`rstreams.runtime.faults`, where they live: the
file log and the stores, below the engine, have write points too)."""

from __future__ import annotations

from rstreams.runtime.faults import maybe_crash, maybe_fail, set_faults

__all__ = ["maybe_crash", "maybe_fail", "set_faults"]
