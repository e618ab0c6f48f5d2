"""Word count against collections.Counter, on both corpora, drawn for the docs site.

    python bench/plots.py [--mb 20] [--runs 3]

For each corpus of bench/corpora.py (``repeated`` prose and ``zipf``, about --mb MB
each) it times, --runs times each, in this order every round:

- baseline: ``collections.Counter`` over ``re.findall(r"\\w+", line.lower())``;
- ``rstreams.run`` of examples/wordcount.py in this process (memory queues);
- ``rstreams run --workers 1`` and ``--workers 2`` (the CLI's default runtime: durable
  file log, exactly-once, RocksDB state, worker processes), fresh data dir each run.

Every table is checked against the Counter. The ratio of a run is Counter's time over
its time (1.0 would be Counter's speed); the figure kept is the median over the runs.
It writes docs/assets/bench/wordcount.json and draws docs/assets/bench/wordcount.png
(ratios) for docs/benchmarks.md. Nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import re
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import make as make_corpus_of

import rstreams

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "assets" / "bench"
WORD = re.compile(r"\w+")
PIPELINE = ROOT / "examples" / "wordcount.py"
MODES = ("in-process", "workers 1", "workers 2")
T = TypeVar("T")


def counter(path: Path) -> collections.Counter[str]:
    c: collections.Counter[str] = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            c.update(WORD.findall(line.lower()))
    return c


def timed(fn: Callable[..., T], *args: object) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - start, value


def in_process(path: Path) -> dict[str, int]:
    topology = runpy.run_path(str(PIPELINE))["build"]().build()
    return rstreams.run(topology, {"sentences": str(path)}).tables["word-counts"]


def durable(path: Path, workers: int) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out.jsonl"
        subprocess.run(
            [sys.executable, "-m", "rstreams", "run", str(PIPELINE), "--input", str(path),
             "--workers", str(workers), "--data-dir", d, "--output", str(out), "-q"],
            check=True,
        )  # fmt: skip
        rows = map(json.loads, out.read_text(encoding="utf-8").splitlines())
        return {r["key"]: r["value"] for r in rows}


def measure(path: Path, runs: int) -> dict[str, object]:
    expected = counter(path)
    words = sum(expected.values())
    times: dict[str, list[float]] = {m: [] for m in ("counter", *MODES)}
    for _ in range(runs):
        times["counter"].append(timed(counter, path)[0])
        for mode, fn, args in (
            ("in-process", in_process, (path,)),
            ("workers 1", durable, (path, 1)),
            ("workers 2", durable, (path, 2)),
        ):
            seconds, table = timed(fn, *args)
            assert table == dict(expected), f"{mode}: the table differs from Counter's"
            times[mode].append(seconds)
    base = statistics.median(times["counter"])
    return {
        "words": words,
        "keys": len(expected),
        "seconds": {m: statistics.median(t) for m, t in times.items()},
        "all_seconds": times,
        "ratio": {m: base / statistics.median(times[m]) for m in MODES},
        "words_per_s": {m: words / statistics.median(t) for m, t in times.items()},
    }


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    width = 0.38
    for i, (corpus, r) in enumerate(results.items()):
        xs = [j + (i - 0.5) * width for j in range(len(MODES))]
        ratios = [r["ratio"][m] for m in MODES]
        bars = ax.bar(xs, ratios, width, label=corpus)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(MODES)), MODES)
    ax.set_ylabel("speed / collections.Counter")
    ax.set_ylim(0, 1.1)
    ax.set_title("Word count, fraction of Counter's speed (median of runs)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0, help="size of each corpus (default 20)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each, median kept (default 3)")
    ap.add_argument("--out", type=Path, default=OUT, help="where the JSON and PNG go")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in ("repeated", "zipf"):
            path = Path(tmp) / f"{corpus}.txt"
            make_corpus_of(corpus, path, args.mb)
            results[corpus] = r = measure(path, args.runs)
            print(
                f"{corpus:9} {args.mb:g} MB, {r['words']:,} words, {r['keys']:,} keys: "
                + ", ".join(f"{m} {r['ratio'][m]:.3f}" for m in MODES)
                + " of Counter",
                flush=True,
            )
    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
        "mb": args.mb,
        "runs": args.runs,
        "results": results,
    }
    (args.out / "wordcount.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(results, args.out / "wordcount.png")
    print(f"wrote {args.out / 'wordcount.json'} and {args.out / 'wordcount.png'}")


if __name__ == "__main__":
    main()
