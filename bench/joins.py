"""An enrichment join (a temporal join) on every mode, against plain Python, in one run.

    python bench/joins.py [--records 1000000] [--runs 3] [--modes in-memory,workers1,...]

The input is one file of JSON lines: 10,000 customers ``{"type": "c", "id", "tier",
"t"}``, each first at the start and then updated about once per 100 records, among
orders ``{"type": "o", "id", "c", "amount", "t"}``; event time ``t`` increases, out of
order by less than 2 s. The pipeline (written next to the input) enriches each order
with its customer's tier as of the order's time: ``orders.leftJoin(customers.toTable())
... .apply(joiner, grace=2000)`` keyed by order id, ``--output`` the final table.

The baseline is the plainest Python that does the same job: read the file, sort by
(time, line), walk once with a dict customer -> tier, write the same JSON lines
(sorted). Every mode's output file must be byte-identical to it (checked each run).

Per mode: wall time of the whole ``rstreams run`` (reading the input, writing the
output: what a user waits for), median of ``--runs``; records/s; the ratio to the
baseline (baseline time / mode time, higher is better); the run's peak RSS; for the
durable modes, the join's state at the end (``rstreams state sizes``). Modes: in-memory,
workers1, workers2, redis (a redis-server started here, when one is on PATH), spark
(local[*], when pyspark and Java are there). Nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # (the tests' redis-server helper)

CUSTOMERS = 10_000
GRACE_MS = 2_000
MODES = ("in-memory", "workers1", "workers2", "redis", "spark")

PIPELINE = """\
import json
from rstreams import StreamBuilder


def enrich(order, customer):
    return {"order": order["id"], "tier": customer and customer["tier"], "amount": order["amount"]}


def build():
    b = StreamBuilder("enrich-bench")
    events = b.source("events").map(json.loads).selectTimestamp(lambda e: e["t"])
    orders = events.filter(lambda e: e["type"] == "o")
    customers = events.filter(lambda e: e["type"] == "c")
    (orders.leftJoin(customers.toTable())
        .where(lambda o: o["c"]).equalTo(lambda c: c["id"])
        .apply(enrich, grace=GRACE)
        .keyBy(lambda r: r["order"])
        .sink("enriched"))
    return b
""".replace("GRACE", str(GRACE_MS))

# Runs a command in a child; prints its wall time, peak RSS (KiB) and exit code.
_MEASURE = (
    "import resource, subprocess, sys, time;"
    "t = time.perf_counter(); r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL);"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
    " r.returncode)"
)


def generate(path: Path, records: int, seed: int = 1) -> None:
    """The input (see the module docstring)."""
    rnd = random.Random(seed)
    tiers = ("bronze", "silver", "gold", "platinum")
    t = 1_700_000_000_000
    with path.open("w", encoding="utf-8") as f:
        for c in range(CUSTOMERS):
            f.write(json.dumps({"type": "c", "id": c, "tier": "bronze", "t": t}) + "\n")
        for i in range(records - CUSTOMERS):
            t += rnd.randint(0, 4)
            ts = t - rnd.randint(0, GRACE_MS - 1) if rnd.random() < 0.05 else t
            if rnd.random() < 0.01:
                e = {
                    "type": "c",
                    "id": rnd.randrange(CUSTOMERS),
                    "tier": rnd.choice(tiers),
                    "t": ts,
                }
            else:
                e = {"type": "o", "id": i, "c": rnd.randrange(CUSTOMERS),
                     "amount": rnd.randint(1, 500), "t": ts}  # fmt: skip
            f.write(json.dumps(e) + "\n")


def baseline(path: Path, out: Path) -> float:
    """The plain-Python as-of join: seconds, reading and writing included."""
    t0 = time.perf_counter()
    with path.open(encoding="utf-8") as f:
        events = [json.loads(line) for line in f]
    order = sorted(range(len(events)), key=lambda i: (events[i]["t"], i))
    tier: dict[int, str] = {}
    table = {}
    for i in order:
        e = events[i]
        if e["type"] == "c":
            tier[e["id"]] = e["tier"]
        else:
            table[e["id"]] = {"order": e["id"], "tier": tier.get(e["c"]), "amount": e["amount"]}
    lines = sorted(
        f'{{"key": {json.dumps(k)}, "value": {json.dumps(v, ensure_ascii=False)}}}\n'
        for k, v in table.items()
    )
    out.write_text("".join(lines), encoding="utf-8")
    return time.perf_counter() - t0


def run_mode(mode: str, pipeline: Path, data: Path, out: Path, work: Path, redis_url: str | None
             ) -> tuple[float, int]:  # fmt: skip
    flags = {
        "in-memory": ["--in-memory"],
        "workers1": ["--workers", "1"],
        "workers2": ["--workers", "2"],
        "redis": ["--workers", "2", "--broker", str(redis_url)],
        "spark": ["--backend", "spark"],
    }[mode]
    shutil.rmtree(work, ignore_errors=True)
    if mode not in ("in-memory", "spark"):
        flags += ["--data-dir", str(work), "--fresh"]
    cmd = [sys.executable, "-m", "rstreams", "run", str(pipeline), "--input", str(data),
           "--output", str(out), "-q", *flags]  # fmt: skip
    res = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True)
    seconds, rss, code = res.stdout.split()
    if code != "0":
        raise SystemExit(f"{mode}: rstreams run failed: {res.stderr[-2000:]}")
    return float(seconds), int(rss)


def state_sizes(work: Path, redis_url: str | None) -> str:
    base = [sys.executable, "-m", "rstreams", "state"]
    where = ["--data-dir", str(work), "--job", "enrich-bench"]
    where += ["--broker", redis_url] if redis_url else []
    listed = subprocess.run([*base, "list", *where], capture_output=True, text=True).stdout
    stores = [line.split("\t")[0] for line in listed.splitlines() if "join" in line]
    if not stores:
        return "?"
    res = subprocess.run([*base, "sizes", stores[0], *where], capture_output=True, text=True)
    if res.returncode:
        return "?"
    totals: dict[str, int] = {}
    for line in res.stdout.splitlines():
        for field in line.split("\t")[1:]:
            name, _, value = field.partition("=")
            totals[name] = totals.get(name, 0) + int(value)
    return f"{totals.get('join_versions', 0):,} versions of {totals.get('join_keys', 0):,} keys"


def available(mode: str) -> bool:
    if mode == "redis":
        return shutil.which("redis-server") is not None
    if mode == "spark":
        try:
            import pyspark  # noqa: F401
        except ImportError:
            return False
        return shutil.which("java") is not None
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--keep", action="store_true", help="keep the input and outputs")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rstreams-joins-"))
    data, pipeline = tmp / "events.jsonl", tmp / "enrich.py"
    generate(data, args.records)
    pipeline.write_text(PIPELINE)
    mb = data.stat().st_size / 1e6
    print(f"{args.records:,} records ({mb:.0f} MB), {CUSTOMERS:,} customers, median of {args.runs}")
    print(f"{'mode':<11}{'seconds':>9}{'records/s':>12}{'x plain':>9}{'peak RSS MB':>13}  state")
    server = None
    try:
        for mode in [m for m in args.modes.split(",") if m]:
            if not available(mode):
                print(f"{mode:<11}  skipped (not installed here)")
                continue
            redis_url = None
            if mode == "redis":
                from tests.helpers.redisserver import RedisServer

                server = server or RedisServer(tmp / "redis").start()
                redis_url = server.url
            times, base_times, rss = [], [], 0
            for _ in range(args.runs):  # each mode paired with the baseline, in turn
                base_times.append(baseline(data, tmp / "plain.jsonl"))
                out = tmp / f"{mode}.jsonl"
                seconds, peak = run_mode(mode, pipeline, data, out, tmp / f"d-{mode}", redis_url)
                times.append(seconds)
                rss = max(rss, peak)
                if out.read_bytes() != (tmp / "plain.jsonl").read_bytes():
                    print(f"{mode}: MISMATCH with the plain-Python table ({out})")
            sec, base = statistics.median(times), statistics.median(base_times)
            state = (
                state_sizes(tmp / f"d-{mode}", redis_url)
                if mode not in ("in-memory", "spark")
                else "-"
            )
            print(f"{mode:<11}{sec:>9.2f}{args.records / sec:>12,.0f}{base / sec:>9.2f}"
                  f"{rss / 1024:>13.0f}  {state}")  # fmt: skip
            print(f"{'  plain':<11}{base:>9.2f}{args.records / base:>12,.0f}{1:>9.2f}")
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")


if __name__ == "__main__":
    main()
