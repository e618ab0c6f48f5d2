"""Exactly-once under fire: SIGKILL workers at random moments, at least 20 times."""

from __future__ import annotations

import collections
import itertools
import random
import re
import textwrap
import time
from pathlib import Path

import pytest

from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from rstreams.serde import get_serde
from tests.helpers.chaos import BACKOFF_MAX, RandomKills

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "data" / "corpus.txt"

PIPELINE = """
import re
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("eos")
    (b.source("lines", queues=4)
       .flatMap(lambda line: re.findall(r"\\w+", line.lower()))
       .keyBy(lambda w: w)
       .count(name="count", queues=4)
       .sink("counts"))
    return b
"""


#: How long a run may take to end once the rebalance storm is over (it takes a few
#: seconds; the bound only turns a run that never ends into a failure that says so).
CALM_S = 240

#: The kill test's input: the corpus once (6,217 lines), ingested at this many lines a
#: second: about 12 s of ingest over which its 20 kills are spread (as three copies at
#: 1,500/s gave), with a third of the words to count and to recover after each kill.
KILLS_INGEST_RATE = 500


@pytest.mark.slow
def test_random_kills_keep_counts_and_output_exact(tmp_path, monkeypatch) -> None:
    random_kills_keep_counts_and_output_exact(tmp_path, monkeypatch)


def random_kills_keep_counts_and_output_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker: str | None = None
) -> None:
    """The kill test on the file log (``broker`` None) or on ``broker`` (a Redis URL:
    tests/redis/test_runtime_redis.py)."""
    # Workers also crash themselves at commit, mid-transaction and during restore.
    monkeypatch.setenv(
        "RSTREAMS_FAULTS", "commit-start:0.02,txn-written:0.02,txn-applying:0.01,restore:0.05"
    )
    pipeline = tmp_path / "eos.py"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    text = CORPUS.read_text(encoding="utf-8")
    corpus = tmp_path / "in.txt"
    corpus.write_text(text, encoding="utf-8")
    chaos = RandomKills(seed=7, limit=20, records=len(text.splitlines()), gap=(0.05, 0.4))
    sup = Supervisor(
        str(pipeline), load_topology(str(pipeline)), {"lines": str(corpus)},
        data_dir=tmp_path / "data", workers=2, chunk_lines=200, progress=chaos,
        max_restarts=10_000, max_restart_backoff=BACKOFF_MAX,
        max_ingest_rate=KILLS_INGEST_RATE, broker=broker,
        worker_args=["--commit-interval", "0.1", "--session-timeout", "2"],
    )  # fmt: skip
    chaos.supervisor = sup
    try:
        sup.run()
        table = sup.tables()["counts"]
        # Every update of the sink topic, in order, per key.
        json = get_serde("json")
        updates: dict[str, list[int]] = collections.defaultdict(list)
        for q in range(sup.queue_counts["counts"]):
            for r in sup.broker.read("counts", q, 0):
                updates[json.deserialize(r.key)].append(json.deserialize(r.value))
    finally:
        sup.close()
    deaths = sup.spawned - 2
    assert chaos.kills == 20 and deaths >= 20
    expected = collections.Counter(
        w for line in text.splitlines() for w in re.findall(r"\w+", line.lower())
    )
    assert table == dict(expected)
    for key, values in updates.items():
        # No duplicate, no lost and no uncommitted update: strictly increasing per key.
        assert all(a < b for a, b in itertools.pairwise(values)), (key, values)
        assert values[-1] == expected[key]


@pytest.mark.slow
def test_rebalance_storm_with_joins_and_clean_leaves(tmp_path) -> None:
    """Workers join and leave (SIGTERM: commit and leave) over and over while data flows."""
    rebalance_storm_with_joins_and_clean_leaves(tmp_path)


def rebalance_storm_with_joins_and_clean_leaves(tmp_path: Path, broker: str | None = None) -> None:
    """The storm on the file log (``broker`` None) or on ``broker`` (a Redis URL). It
    blows while the input is appended (throttled, so as many events on a loaded machine
    as on a quiet one), then stops: a storm paced by the wall clock with no end could
    keep a loaded machine's tasks restoring forever (a group that changes every few
    hundred ms), and a run that never ends would fail nothing. After it, the run must
    end within :data:`CALM_S`."""
    pipeline = tmp_path / "eos.py"
    pipeline.write_text(textwrap.dedent(PIPELINE))
    text = CORPUS.read_text(encoding="utf-8")
    corpus = tmp_path / "in.txt"
    corpus.write_text(text * 2, encoding="utf-8")
    records = len(text.splitlines()) * 2
    rng = random.Random(11)
    events = {"joins": 0, "leaves": 0}
    next_event = [time.monotonic() + 0.3]
    calm_since: list[float] = []

    def storm(status) -> None:
        now = time.monotonic()
        if status["records_in"] >= records:  # all appended: the storm is over
            calm_since[:] = calm_since or [now]
            if now - calm_since[0] > CALM_S:
                raise AssertionError(f"the run did not end {CALM_S} s after the storm")
            return
        if now < next_event[0]:
            return
        next_event[0] = now + rng.uniform(0.1, 0.4)
        extra = [s for s in sup.procs if s >= 2]
        if len(extra) >= 3 or (extra and rng.random() < 0.5):
            sup.remove_worker(rng.choice(extra))  # commits and leaves the group
            events["leaves"] += 1
        else:
            sup.add_worker()  # joins the group
            events["joins"] += 1

    sup = Supervisor(
        str(pipeline), load_topology(str(pipeline)), {"lines": str(corpus)},
        data_dir=tmp_path / "data", workers=2, chunk_lines=200, progress=storm,
        max_restarts=10_000, max_ingest_rate=2_000, broker=broker,
        worker_args=["--commit-interval", "0.1", "--allocation", "consistent_hash"],
    )  # fmt: skip
    try:
        sup.run()
        table = sup.tables()["counts"]
    finally:
        sup.close()
    assert events["joins"] >= 10 and events["leaves"] >= 5
    expected = collections.Counter(
        w for line in text.splitlines() * 2 for w in re.findall(r"\w+", line.lower())
    )
    assert table == dict(expected)
