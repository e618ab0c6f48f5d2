"""Peak memory of ``rstreams run --workers N`` as the input grows: is it flat?

    python bench/memory.py [--mb 50 200] [--workers 2] [--runs 1] [--json FILE]

For each corpus of bench/corpora.py (``repeated`` and ``zipf``) and each size of --mb,
it runs examples/wordcount.py with ``rstreams run --workers N --output`` in a fresh data
dir (the CLI's default runtime: durable file log, exactly-once, RocksDB state), checks
the table against ``collections.Counter``'s and prints the peak RSS of the supervisor
(the ``rstreams run`` process), of the largest worker (each process's own VmHWM, read
from /proc every 0.25 s by bench/plots.py's TreeSampler) and of the whole process tree
(summed RSS), then, per corpus, the ratio of the largest size's peaks to the smallest's
(1.0: flat). With ``--runs`` above 1, each figure is the median over the runs. Linux
only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import KINDS
from corpora import make as make_corpus_of
from plots import LAMBDA, counter, run_cli

#: What is reported per run: the peak RSS in MB of each of these.
PARTS = ("supervisor", "worker", "tree")


def measure(path: Path, workers: int, runs: int) -> dict[str, float]:
    """Median over ``runs`` of each part's peak RSS (MB) of a word count of ``path``."""
    expected = dict(counter(path))
    peaks: dict[str, list[float]] = {part: [] for part in PARTS}
    for _ in range(runs):
        table, sampler = run_cli(path, workers, LAMBDA)
        assert table == expected, "the table differs from Counter's"
        peaks["supervisor"].append(sampler.peak_kib("supervisor") / 1024)
        peaks["worker"].append(sampler.peak_kib("worker") / 1024)
        peaks["tree"].append(sampler.tree_peak_kib / 1024)
    return {part: statistics.median(v) for part, v in peaks.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[50.0, 200.0], help="input sizes")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--runs", type=int, default=1, help="runs per size, median kept")
    ap.add_argument("--corpus", choices=KINDS, nargs="+", default=list(KINDS))
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args(argv)
    sizes = sorted(args.mb)
    results: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{'corpus':9} {'MB':>6} " + " ".join(f"{p + ' MB':>13}" for p in PARTS), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in args.corpus:
            results[corpus] = {}
            for mb in sizes:
                path = Path(tmp) / f"{corpus}.txt"
                make_corpus_of(corpus, path, mb)
                r = results[corpus][f"{mb:g}"] = measure(path, args.workers, args.runs)
                path.unlink()
                print(f"{corpus:9} {mb:6g} " + " ".join(f"{r[p]:13.1f}" for p in PARTS), flush=True)
            low, high = results[corpus][f"{sizes[0]:g}"], results[corpus][f"{sizes[-1]:g}"]
            print(
                f"{corpus:9} {f'{sizes[-1]:g}/{sizes[0]:g}':>6} "
                + " ".join(f"{high[p] / low[p]:13.2f}" for p in PARTS),
                flush=True,
            )
    if args.json is not None:
        report = {"workers": args.workers, "runs": args.runs, "peak_rss_mb": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
