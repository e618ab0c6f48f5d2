"""Garbage-collector settings for processes that move millions of records.

CPython runs a young-generation collection every 700 container allocations. A batch of
records allocates tens of thousands of tuples and lists that live until the batch is
done, so the default runs thousands of collections that find nothing, and each promotes
the batch's objects to older generations whose collections then walk them again: a
third of a word count's time. Records are freed by reference counting; the collector
is only needed for reference cycles, which the engine does not make per record.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Young-generation threshold while records flow (CPython's default is 700).
THRESHOLD = 50_000


def tune() -> None:
    """For a process of our own (a worker): move what start-up allocated (modules,
    the topology) out of the collector's sight and collect less often."""
    gc.collect()
    gc.freeze()
    _, t1, t2 = gc.get_threshold()
    gc.set_threshold(THRESHOLD, t1, t2)


@contextlib.contextmanager
def tuned() -> Iterator[None]:
    """:func:`tune` for the duration of a run inside someone else's process; the
    previous thresholds come back after (frozen objects stay frozen, which is harmless)."""
    previous = gc.get_threshold()
    t0, t1, t2 = previous
    gc.set_threshold(max(t0, THRESHOLD), t1, t2)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
