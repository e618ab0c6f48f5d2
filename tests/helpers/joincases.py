"""Random join cases and their reference table (sort by time and position, walk once):
the property tests of joins on every backend use them."""

from __future__ import annotations

import json
import random
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["ENRICH", "Case", "enrich_lines", "write_case"]

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

    def pipeline(self, counted: bool = True) -> str:
        """The pipeline file of this case (two branches of one source topic): each
        result pair counted, or (``counted=False``: no aggregation after the join, for
        Spark Structured Streaming) each pair keyed by itself."""
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
        tail = '.count(name="n").toRStream()' if counted else ""
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
                    .keyBy(json.dumps){tail}.sink("out"))
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
                        near = range(e["t"] - lo, e["t"] + hi + 1)
                        matched = [o for o in other if o["k"] == e["k"] and o["t"] in near]
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


def write_case(tmp: Path, case: Case) -> tuple[Path, Path]:
    pipeline = tmp / f"jp{case.seed}.py"
    pipeline.write_text(case.pipeline())
    data = tmp / f"events{case.seed}.jsonl"
    data.write_text("\n".join(case.lines) + "\n")
    return pipeline, data


#: The case of the joins issue: a join without window of two branches of one file, no
#: timestamps (ingestion time); the latest result per order.
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


def enrich_lines(customers: int, orders: int) -> list[str]:
    """Each customer first silver, then gold, and only then the orders: every order
    must meet gold."""
    lines = [json.dumps({"type": "c", "id": c, "tier": "silver"}) for c in range(customers)]
    lines += [json.dumps({"type": "c", "id": c, "tier": "gold"}) for c in range(customers)]
    lines += [json.dumps({"type": "o", "id": i, "c": i % customers}) for i in range(orders)]
    return lines
