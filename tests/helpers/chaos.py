"""Workers SIGKILLed at random during a durable run: a ``progress`` callback of the
Supervisor (the exactly-once kill tests of the file log and of Redis)."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path
from typing import Any

#: The kills are spread over this share of the input: the rest leaves time for kills
#: that had to wait (no live worker) before the run can end.
SPREAD = 0.75

#: ``--max-restart-backoff`` of the kill tests (the runtime's default is 5 s; a restart
#: waits 0.1 s, doubling after each restart in a row without progress). The kills come
#: faster than a replacement can commit, so the backoff soon sits at its cap: at 5 s the
#: kills due mid-input wait for a live worker and pile up after the input's end, one
#: each 2.5 s, and the run mostly waits. At 1 s they land about where
#: :class:`RandomKills` means them to, spread over the input.
BACKOFF_MAX = 1.0


class RandomKills:
    """Pass as ``progress=``, then set :attr:`supervisor`: SIGKILL a random live worker
    ``limit`` times in all, the k-th once the ingest has appended k/(limit+1) of
    :data:`SPREAD` of the input's ``records`` and at least ``gap`` (uniform) seconds
    after the one before. Paced by the input, not the clock, so a loaded machine gets
    as many kills as a quiet one (the ingest is throttled: ``max_ingest_rate``). A kill
    due while no worker is alive (replacements start after a backoff) waits for one.
    :attr:`kills` counts them. Seeded: the same choices each run."""

    def __init__(self, seed: int, limit: int, records: int, gap: tuple[float, float]) -> None:
        self.rng = random.Random(seed)
        self.limit, self.records, self.gap = limit, records, gap
        self.kills = 0
        self.next_kill = 0.0
        self.supervisor: Any = None

    def due(self, records_in: int) -> bool:
        """Whether the next kill is due once ``records_in`` input records were appended."""
        share = SPREAD * (self.kills + 1) / (self.limit + 1)
        return self.kills < self.limit and records_in >= share * self.records

    def __call__(self, status: dict[str, Any]) -> None:
        now = time.monotonic()
        sup = self.supervisor
        if sup is None or now < self.next_kill or not self.due(status["records_in"]):
            return
        live = sorted(s for s, p in sup.procs.items() if p.poll() is None)
        if live:
            sup.kill_worker(self.rng.choice(live), signal.SIGKILL)
            self.kills += 1
            self.next_kill = now + self.rng.uniform(*self.gap)


def run_with_kills(
    pipeline: Path, inputs: dict[str, str], sink: str, data_dir: Path, *, kills: int,
    records: int, seed: int = 1, broker: str | None = None, ingest_rate: int = 2_000,
) -> dict[Any, Any]:  # fmt: skip
    """A durable run of ``pipeline`` with two workers SIGKILLed ``kills`` times at
    random (:class:`RandomKills`, over ``records`` input records): the final table of
    ``sink``. Asserts that every kill happened."""
    from rstreams.loader import load_topology
    from rstreams.runtime.engine.coordination.supervisor import Supervisor

    chaos = RandomKills(seed=seed, limit=kills, records=records, gap=(0.1, 0.5))
    sup = Supervisor(
        str(pipeline), load_topology(str(pipeline)), inputs, data_dir=data_dir, workers=2,
        chunk_lines=100, progress=chaos, broker=broker, max_restarts=10_000,
        max_ingest_rate=ingest_rate,
        worker_args=["--commit-interval", "0.1", "--session-timeout", "2"],
    )  # fmt: skip
    chaos.supervisor = sup
    try:
        sup.run()
        table = sup.tables()[sink]
    finally:
        sup.close()
    assert chaos.kills == kills
    return table
