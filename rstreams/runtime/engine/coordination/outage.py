"""Riding out a lost connection to a networked broker (a Redis server restarting).

The supervisor's loop goes through the broker at every step (ingest, end of input,
statistics, the workers' progress). When the connection breaks it waits with a backoff
and tries again, for up to :data:`PATIENCE` seconds of failures in a row; then the
fault ends the run. Once the broker answers again the caller re-syncs from what the
broker holds (a write whose reply was lost may or may not have been applied) and checks
that no queue ends below where it saw it end (a server that came back without its data
is a :class:`~rstreams.runtime.queues.redisstreams.RedisDataLostError`, never a run
that goes on from nothing).
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("rstreams.supervisor")

#: Seconds of broker connection failures in a row the supervisor rides out.
PATIENCE = 120.0


def is_connection_fault(e: BaseException) -> bool:
    """Is ``e`` the Redis client's lost connection, timeout or "still loading"?

    >>> is_connection_fault(ValueError("x"))
    False
    """
    if not type(e).__module__.startswith("redis"):
        return False  # (and the redis client stays unimported on the file log)
    import redis.exceptions as rx

    # (BusyLoadingError is a ConnectionError; AuthenticationError is one too, but a
    # password refused after a restart is a configuration error, not an outage)
    return isinstance(e, (rx.ConnectionError, rx.TimeoutError)) and not isinstance(
        e, (rx.AuthenticationError, rx.AuthorizationError)
    )


class Outage:
    """Failures of the broker connection in a row: :meth:`ride_out` one, :meth:`over`
    when a step went through."""

    def __init__(self, patience: float = PATIENCE) -> None:
        self.patience = patience
        self.since: float | None = None
        self.delay = 0.05
        #: How many outages were ridden out (for tests and statistics).
        self.count = 0

    def ride_out(self, e: BaseException) -> bool:
        """False if ``e`` is not a connection fault (the caller raises it); else wait a
        backoff and return True (the caller re-syncs and goes on), or raise ``e`` once
        the broker failed for longer than the patience."""
        if not is_connection_fault(e):
            return False
        now = time.monotonic()
        if self.since is None:
            self.since, self.delay = now, 0.05
            self.count += 1
            log.warning("lost the broker (%s); trying again for up to %.0f s", e, self.patience)
        elif now - self.since > self.patience:
            raise e
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, 1.0)
        return True

    def over(self) -> bool:
        """A step went through; True if that ended an outage."""
        if self.since is None:
            return False
        log.warning("the broker answers again after %.1f s", time.monotonic() - self.since)
        self.since = None
        return True
