"""Workers SIGKILLed at random during a durable run: a ``progress`` callback of the
Supervisor (the exactly-once kill tests of the file log and of Redis)."""

from __future__ import annotations

import random
import signal
import time
from typing import Any


class RandomKills:
    """Pass as ``progress=``, then set :attr:`supervisor`: at each progress call, once
    ``first`` seconds have passed and then every ``gap`` (uniform) seconds, SIGKILL a
    random live worker (a killed one's replacement starts after a backoff), at most
    ``limit`` times. :attr:`kills` counts them. Seeded: the same choices each run."""

    def __init__(self, seed: int, limit: int, first: float, gap: tuple[float, float]) -> None:
        self.rng = random.Random(seed)
        self.limit, self.gap = limit, gap
        self.kills = 0
        self.next_kill = time.monotonic() + first
        self.supervisor: Any = None

    def __call__(self, status: object) -> None:
        now = time.monotonic()
        sup = self.supervisor
        if sup is None or self.kills >= self.limit or now < self.next_kill:
            return
        live = sorted(s for s, p in sup.procs.items() if p.poll() is None)
        if live:
            sup.kill_worker(self.rng.choice(live), signal.SIGKILL)
            self.kills += 1
        self.next_kill = now + self.rng.uniform(*self.gap)
