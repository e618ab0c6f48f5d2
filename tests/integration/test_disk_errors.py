"""A disk that fills up or fails under a worker: every write of the commit path (log
appends, the transaction record, index, new segments, fsync, durable points, committed
offsets, RocksDB) is made to raise ENOSPC or EIO in turn (RSTREAMS_FAULTS points, see
rstreams.runtime.faults). The worker stops on the error without committing anything
more, and a new worker over the same directory, the disk fixed, gives the exact count.

In this process, over the real file log and RocksDB, with Worker.step on a clock the
test moves.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections import Counter

import pytest

import rstreams.runtime.engine.coordination.local as local
from rstreams import StreamBuilder
from rstreams.runtime.engine.coordination.worker import Worker, open_broker
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.faults import set_faults

WORD = re.compile(r"\w+")

#: Every write point of the commit path; topic-qualified appends pick one kind of queue.
POINTS = [
    "log-append/wc-transactions",  # the transaction record (the commit point)
    "log-append/wc-count-shuffle",  # outputs of the first sub-topology
    "log-append/counts",  # outputs of the second
    "log-append/wc-count-changelog",  # changelog records
    "log-index",
    "log-roll",
    "log-sync",
    "log-durable",
    "offset-commit",
    "store-write",
]


def wordcount():
    b = StreamBuilder("wc")
    (
        b.source("lines", queues=2)
        .flatMap(lambda v: WORD.findall(v.lower()))
        .keyBy(lambda w: w)
        .count(name="count", queues=2)
        .sink("counts")
    )
    return b.build()


def engine(tmp_path, guarantee: str = "exactly-once") -> EngineConfig:
    return EngineConfig(
        guarantee=guarantee, state="rocksdb", state_dir=str(tmp_path / "state"),
        coalesce=True, combine=True,
    )  # fmt: skip


def table(broker) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in range(broker.queue_count("counts") or 0):
        for r in broker.read("counts", q, 0):
            out[json.loads(r.key or b"")] = json.loads(r.value or b"")
    return out


def finish(worker: Worker, now: float) -> float:
    """Step until the worker owns its tasks and committed all their input."""
    for _ in range(20_000):
        now += 0.05
        moved = worker.step(now)
        if (
            not moved
            and len(worker.tasks) == len(worker.wanted)
            and not any(t.lag() or t.uncommitted for t in worker.tasks.values())
        ):
            return now
    raise AssertionError("the worker did not finish")


@pytest.fixture(autouse=True)
def no_faults_after():
    yield
    set_faults("")


def run_with_a_failing_disk(
    tmp_path, lines: list[str], point: str, err: str, guarantee: str
) -> dict[str, int]:
    """A worker counts ``lines``; from some point on ``point`` fails with ``err``; the
    worker stops on it, and a new worker (the disk fixed) finishes. The table then."""
    broker = open_broker(tmp_path)
    worker = Worker(
        wordcount(), broker, tmp_path, member_id="a", engine=engine(tmp_path, guarantee)
    )
    worker.join(0.0)
    broker.append("lines", 0, [(0, None, v.encode(), ()) for v in lines[:300]])
    now = finish(worker, 0.0)  # some commits went through
    for i in range(300, len(lines), 100):
        rows = [(0, None, v.encode(), ()) for v in lines[i : i + 100]]
        broker.append("lines", i // 100 % 2, rows)
    broker.flush()
    # From the second pass on, as a disk that filled up stays full.
    set_faults(f"{point}:1:{err}@1")
    with pytest.raises(Exception) as failed:
        finish(worker, now)
    code = getattr(errno, err)
    # (RocksDB's error is a StateStoreError quoting it)
    assert getattr(failed.value, "errno", None) == code or os.strerror(code) in str(failed.value)
    for close in (worker.leave, broker.close):
        with contextlib.suppress(OSError):  # (the disk is still full)
            close()
    set_faults("")  # space freed
    broker = open_broker(tmp_path)
    again = Worker(wordcount(), broker, tmp_path, member_id="b", engine=engine(tmp_path, guarantee))
    again.join(0.0)
    finish(again, 0.0)
    again.leave()
    counts = table(broker)
    broker.close()
    return counts


def words(lines: list[str]) -> dict[str, int]:
    return dict(Counter(w for line in lines for w in WORD.findall(line.lower())))


@pytest.mark.parametrize("err", ["ENOSPC", "EIO"])
@pytest.mark.parametrize("point", POINTS)
def test_a_commit_that_could_not_be_written_is_redone_exactly(
    tmp_path, monkeypatch, corpus_lines, point, err
) -> None:
    monkeypatch.setattr(local, "INTERNAL_SEGMENT_BYTES", 16_384)  # segments roll
    lines = corpus_lines[:1200]
    assert run_with_a_failing_disk(tmp_path, lines, point, err, "exactly-once") == words(lines)


@pytest.mark.parametrize(
    "point", ["log-append/wc-count-shuffle", "log-append/wc-count-changelog", "log-sync"]
)
def test_at_least_once_a_commit_that_could_not_be_written_loses_nothing(
    tmp_path, corpus_lines, point
) -> None:
    """At least once, what followed the last commit may be counted twice; never less."""
    lines = corpus_lines[:1200]
    counts = run_with_a_failing_disk(tmp_path, lines, point, "ENOSPC", "at-least-once")
    expected = words(lines)
    assert counts.keys() == expected.keys()
    assert all(counts[w] >= n for w, n in expected.items())
