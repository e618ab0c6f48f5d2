"""Nexmark on every mode against the plain-Python baseline, in one run.

For each query: the baseline (bench/nexmark/baseline.py) and ``rstreams run
examples/nexmark/qN.py`` on each mode, each writing its table to a file (reading the
results is part of what a user waits for), the median wall time of ``--repeat`` runs,
events per second, and the share of the baseline's speed (1.0: as fast as plain Python).

    python bench/nexmark/generate.py --events 1000000 --out /tmp/events.jsonl
    python bench/nexmark/run.py /tmp/events.jsonl --queries q0 q1 q7 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = {
    "in-memory": ["--in-memory"],
    "workers 1": ["--workers", "1"],
    "workers 2": ["--workers", "2"],
}


def _time(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("events")
    p.add_argument("--queries", nargs="+", default=["q0", "q1", "q2", "q7", "q11"])
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    with open(args.events, "rb") as f:
        lines = sum(1 for _ in f)
    print(f"{lines:,} events; median of {args.repeat}", flush=True)
    print(f"{'query':6} {'mode':10} {'wall s':>8} {'events/s':>10} {'share':>6}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "out.jsonl")
        for q in args.queries:
            base = [sys.executable, str(ROOT / "bench" / "nexmark" / "baseline.py"), q,
                    args.events, out]  # fmt: skip
            run = [sys.executable, "-m", "rstreams", "run",
                   str(ROOT / "examples" / "nexmark" / f"{q}.py"), "--input", args.events,
                   "--output", out, "-q"]  # fmt: skip
            rows = {"plain Python": base}
            for mode in args.modes:
                data = (
                    ["--data-dir", str(Path(tmp) / "d"), "--fresh"] if mode != "in-memory" else []
                )
                rows[mode] = [*run, *MODES[mode], *data]
            times = {name: statistics.median(_time(cmd) for _ in range(args.repeat))
                     for name, cmd in rows.items()}  # fmt: skip
            for name, t in times.items():
                share = times["plain Python"] / t
                print(f"{q:6} {name:10} {t:8.2f} {lines / t:10,.0f} {share:6.2f}", flush=True)


if __name__ == "__main__":
    main()
