"""Embedded runtime throughput and memory, as ratios measured in one run.

    python bench/runtime.py [--mb 100]

On a generated corpus of --mb megabytes (examples/data/corpus.txt repeated, with word
variants so the vocabulary grows), it times:

- baseline: ``collections.Counter`` over ``re.findall(r"\\w+", line.lower())``;
- ``rstreams run --in-memory`` (one process, memory queues);
- ``rstreams run --workers 1`` and ``--workers 2`` (durable file log, worker processes);

and prints words/s and the ratios (to Counter, and 2 workers / 1 worker). Then it runs
the durable runtime on a corpus a tenth of the size and prints the peak RSS (largest
process of the run) of both, whose ratio should stay near 1: memory is bounded by the
state, not the input. Every run's final table is checked against the Counter.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wordcount import make_corpus

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "examples" / "wordcount.py"
WORD = re.compile(r"\w+")

# Runs a command in a child and reports the peak RSS (KiB) of its largest descendant.
_MEASURE = (
    "import resource, subprocess, sys, time;"
    "t = time.perf_counter(); r = subprocess.run(sys.argv[1:]);"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
    " r.returncode)"
)


def rstreams_run(corpus: Path, out: Path, *flags: str) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "rstreams", "run", str(PIPELINE), "--input", str(corpus),
           "--output", str(out), "-q", *flags]  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, check=True
    )
    seconds, rss, code = res.stdout.split()
    if code != "0":
        raise SystemExit(f"rstreams run failed: {res.stderr}")
    return float(seconds), int(rss)


def table(path: Path) -> dict[str, int]:
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return {r["key"]: r["value"] for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0, help="corpus size in MB (default 100)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        big, small, plain = tmp / "big.txt", tmp / "small.txt", tmp / "plain.txt"
        make_corpus(big, args.mb)
        # Memory is compared on inputs with the same vocabulary (state size), 10x apart.
        make_corpus(plain, args.mb, grow_vocabulary=False)
        make_corpus(small, args.mb / 10, grow_vocabulary=False)

        t0 = time.perf_counter()
        with big.open(encoding="utf-8") as f:
            counts = collections.Counter(w for line in f for w in WORD.findall(line.lower()))
        t_base = time.perf_counter() - t0
        words = sum(counts.values())
        expected = dict(counts)

        rows = []
        for label, flags in (
            ("run --in-memory", ["--in-memory"]),
            ("run --workers 1", ["--workers", "1", "--data-dir", str(tmp / "d1")]),
            ("run --workers 2", ["--workers", "2", "--data-dir", str(tmp / "d2")]),
        ):
            out = tmp / "out.jsonl"
            seconds, rss = rstreams_run(big, out, *flags)
            assert table(out) == expected, f"{label}: wrong result"
            rows.append((label, seconds, rss))
        _, small_rss = rstreams_run(
            small, tmp / "small.jsonl", "--workers", "2", "--data-dir", str(tmp / "d3")
        )
        _, plain_rss = rstreams_run(
            plain, tmp / "plain.jsonl", "--workers", "2", "--data-dir", str(tmp / "d4")
        )

    print(f"corpus: {args.mb:.0f} MB, {words:,} words, {len(counts):,} distinct")
    print(f"{'':22}{'seconds':>9}{'words/s':>12}{'/Counter':>10}{'peak RSS MB':>13}")
    print(f"{'Counter (baseline)':22}{t_base:9.2f}{words / t_base:12,.0f}{1:10.3f}")
    for label, seconds, rss in rows:
        ratio = t_base / seconds
        print(f"{label:22}{seconds:9.2f}{words / seconds:12,.0f}{ratio:10.3f}{rss / 1024:13.1f}")
    one, two = rows[1][1], rows[2][1]
    print(f"2 workers / 1 worker speed-up: {one / two:.2f}x")
    print(
        f"peak RSS, same vocabulary, {args.mb:.0f} MB vs {args.mb / 10:.0f} MB input "
        f"(2 workers): {plain_rss / 1024:.1f} MB vs {small_rss / 1024:.1f} MB, ratio "
        f"{plain_rss / small_rss:.2f} (target <= 1.2)"
    )


if __name__ == "__main__":
    main()
