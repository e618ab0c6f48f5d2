"""Joins give one table for any split of the input: a property test against a reference.

Random inputs (keys, ties, disorder within grace, null keys) joined by every join kind
(inner, left, outer) in every form (temporal join of two streams, stream-table join,
windowed join) with random queue counts (1 to 16, source and join), run on the test
driver, in memory and durably (1 or 2 workers, random chunk sizes, workers SIGKILLed at
random): every run's table must equal what a plain reference computes (sort by time and
position, walk once). The table counts each ``(left id, right id)`` result, so a result
lost, doubled or joined to the wrong version shows. Redis and Spark run the same cases
(tests/redis/test_join_property_redis.py, tests/spark/test_temporal_joins_spark.py).
"""

from __future__ import annotations

import json
import random
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from helpers.chaos import RandomKills
from rstreams.loader import load_topology
from rstreams.runner import run
from rstreams.runtime.engine.supervisor import Supervisor
from rstreams.testing import TopologyTestDriver

KINDS = ("inner", "left", "outer")
FORMS = ("temporal", "table", "windowed")
METHOD = {"inner": "join", "left": "leftJoin", "outer": "outerJoin"}


class Case:
    """One random join: its input lines, pipeline parameters and reference table."""

    def __init__(self, seed: int, records: int = 300) -> None:
        rnd = random.Random(seed)
        self.seed = seed
        self.kind = KINDS[seed % 3]
        self.form = FORMS[(seed // 3) % 3]
        self.grace = rnd.choice([0, 3, 10])
        self.ttl = rnd.choice([None, 5, 40])
        self.before, self.after = rnd.randint(0, 6), rnd.randint(0, 6)
        self.source_queues = rnd.randint(1, 16)
        self.join_queues = rnd.randint(1, 16)
        keys = [f"k{i}" for i in range(rnd.randint(2, 12))]
        top, self.events = 0, []
        for i in range(records):
            top += rnd.choice([0, 0, 1, 1, 2, 5])  # ties are common
            ts = max(0, top - rnd.randint(0, self.grace))  # disorder within grace
            key = None if rnd.random() < 0.03 else rnd.choice(keys)
            self.events.append({"id": i, "s": rnd.choice("LR"), "k": key, "t": ts})

    @property
    def lines(self) -> list[str]:
        return [json.dumps(e) for e in self.events]

    def pipeline(self) -> str:
        """The pipeline file of this case (two branches of one source topic)."""
        if self.form == "windowed":
            how = f".window(JoinWindow(before={self.before}, after={self.after}, "
            how += f"grace={self.grace}))"
            apply = f".apply(pair, name='j', queues={self.join_queues})"
        else:
            how = ""
            apply = (
                f".apply(pair, name='j', queues={self.join_queues}, grace={self.grace}, "
                f"ttl={self.ttl})"
            )
        right = "right.toTable()" if self.form == "table" else "right"
        return textwrap.dedent(f"""\
            import json
            from rstreams import JoinWindow, StreamBuilder

            def pair(left, right):
                return [left and left["id"], right and right["id"]]

            def build():
                b = StreamBuilder("jp{self.seed}")
                events = (b.source("events", queues={self.source_queues}).map(json.loads)
                          .selectTimestamp(lambda e: e["t"]))
                left = events.filter(lambda e: e["s"] == "L")
                right = events.filter(lambda e: e["s"] == "R")
                (left.{METHOD[self.kind]}({right})
                    .where(lambda e: e["k"]).equalTo(lambda e: e["k"]){how}
                    {apply}
                    .keyBy(json.dumps).count(name="n").toRStream().sink("out"))
                return b
            """)

    def expected(self) -> dict[str, int]:
        """The reference: each result pair, counted."""
        out: Counter[str] = Counter()
        rows = [(e["t"], i, e) for i, e in enumerate(self.events)]
        outer = {"L": self.kind in ("left", "outer"), "R": self.kind == "outer"}
        if self.form == "windowed":
            for side in "LR":
                mine = [e for _, _, e in rows if e["s"] == side]
                other = [e for _, _, e in rows if e["s"] != side]
                lo, hi = (self.before, self.after) if side == "L" else (self.after, self.before)
                for e in mine:
                    if e["k"] is None:
                        matched = []
                    else:
                        matched = [o for o in other
                                   if o["k"] == e["k"] and e["t"] - lo <= o["t"] <= e["t"] + hi]  # fmt: skip
                    if side == "L":
                        for o in matched:
                            out[json.dumps([e["id"], o["id"]])] += 1
                    if not matched and outer[side]:
                        pair = [e["id"], None] if side == "L" else [None, e["id"]]
                        out[json.dumps(pair)] += 1
            return dict(out)
        emits = "L" if self.form == "table" else "LR"
        ttl = self.ttl or 2**62
        latest: dict[tuple[str, Any], tuple[int, int]] = {}
        for ts, _, e in sorted(rows, key=lambda r: (r[0], r[1])):
            side, key = e["s"], e["k"]
            other = "R" if side == "L" else "L"
            if key is not None:
                latest[(side, key)] = (ts, e["id"])
            if side not in emits:
                continue
            found = latest.get((other, key)) if key is not None else None
            oid = found[1] if found is not None and found[0] + ttl >= ts else None
            if oid is None and not outer[side]:
                continue
            pair = [e["id"], oid] if side == "L" else [oid, e["id"]]
            out[json.dumps(pair)] += 1
        return dict(out)


def _write(tmp: Path, case: Case) -> tuple[Path, Path]:
    pipeline = tmp / f"jp{case.seed}.py"
    pipeline.write_text(case.pipeline())
    data = tmp / f"events{case.seed}.jsonl"
    data.write_text("\n".join(case.lines) + "\n")
    return pipeline, data


def _driver_table(pipeline: Path, case: Case) -> dict[str, int]:
    with TopologyTestDriver(load_topology(str(pipeline))) as driver:
        for line in case.lines:
            driver.pipe("events", line)
        driver.end_of_input()
        return driver.read_table("out")


@pytest.mark.parametrize("seed", range(18))
def test_driver_and_in_memory_runs_equal_the_reference(tmp_path, seed) -> None:
    case = Case(seed)
    pipeline, data = _write(tmp_path, case)
    expected = case.expected()
    assert _driver_table(pipeline, case) == expected, case.pipeline()
    topology = load_topology(str(pipeline))
    chunk = random.Random(seed).choice([7, 50, 1000])
    got = run(topology, {"events": str(data)}, chunk_lines=chunk).tables["out"]
    assert got == expected, case.pipeline()


@pytest.mark.parametrize("seed", [0, 4, 8])
def test_durable_runs_with_one_or_two_workers_equal_the_reference(tmp_path, seed) -> None:
    case = Case(seed)
    pipeline, data = _write(tmp_path, case)
    topology = load_topology(str(pipeline))
    for workers in (1, 2):
        chunk = random.Random(seed + workers).choice([20, 100, 500])
        got = run(
            topology, {"events": str(data)}, chunk_lines=chunk, workers=workers,
            data_dir=str(tmp_path / f"d{workers}"), pipeline=str(pipeline),
        ).tables["out"]  # fmt: skip
        assert got == case.expected(), (workers, case.pipeline())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 5, 6])
def test_workers_killed_at_random_give_the_reference_table(tmp_path, seed) -> None:
    case = Case(seed, records=2400)
    pipeline, data = _write(tmp_path, case)
    chaos = RandomKills(seed=seed, limit=4, records=len(case.events), gap=(0.1, 0.4))
    sup = Supervisor(
        str(pipeline), load_topology(str(pipeline)), {"events": str(data)},
        data_dir=tmp_path / "data", workers=2, chunk_lines=100, progress=chaos,
        max_restarts=10_000, max_ingest_rate=2_000,
        worker_args=["--commit-interval", "0.1", "--session-timeout", "2"],
    )  # fmt: skip
    chaos.supervisor = sup
    try:
        sup.run()
        got = sup.tables()["out"]
    finally:
        sup.close()
    assert chaos.kills == 4
    assert got == case.expected(), case.pipeline()


def test_the_issue_case_every_order_meets_the_latest_customer(tmp_path) -> None:
    # Customers first silver, then gold, then orders: a join without window of two
    # branches of one file, no timestamps (ingestion time): every order says gold.
    lines = [json.dumps({"type": "c", "id": c, "tier": "silver"}) for c in range(50)]
    lines += [json.dumps({"type": "c", "id": c, "tier": "gold"}) for c in range(50)]
    lines += [json.dumps({"type": "o", "id": i, "c": i % 50}) for i in range(3000)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "enrich.py").write_text(ENRICH)
    topology = load_topology(str(tmp_path / "enrich.py"))
    inputs = {"events": str(tmp_path / "in.jsonl")}
    tables = [
        run(topology, inputs, chunk_lines=37).tables["enriched"],
        run(topology, inputs, chunk_lines=100, workers=2, data_dir=str(tmp_path / "d"),
            pipeline=str(tmp_path / "enrich.py")).tables["enriched"],  # fmt: skip
    ]
    for table in tables:
        assert len(table) == 3000
        assert {v["tier"] for v in table.values()} == {"gold"}


ENRICH = """\
import json
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("enrich")
    events = b.source("events", queues=8).map(json.loads)
    orders = events.filter(lambda e: e["type"] == "o")
    customers = events.filter(lambda e: e["type"] == "c")
    (orders.leftJoin(customers).where(lambda o: o["c"]).equalTo(lambda c: c["id"])
        .apply(lambda o, c: {"order": o["id"], "tier": c and c["tier"]})
        .keyBy(lambda r: r["order"]).sink("enriched"))
    return b
"""
