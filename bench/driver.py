"""TopologyTestDriver throughput on the word count (record at a time, every update).

    python bench/driver.py [--lines 6217 | --mb 2] [--runs 3] [--short]

Pipes the lines of two corpora, one ``pipe`` per line, through examples/wordcount.py in
a :class:`~rstreams.testing.TopologyTestDriver`:

- ``corpus``: the first --lines lines of examples/data/corpus.txt (all of it by default;
  with --mb, the file repeated up to that many megabytes);
- ``zipf``: as many lines of bench/corpora.py's Zipf corpus (12 words a line, 50,000
  distinct words), or that many megabytes of it;
- ``short`` (with --short): short lines, the concatenated source of the running
  Python's standard library (sorted .py files, about 4 words a line), --mb megabytes of
  it (2 by default: about 57,000 lines).

For each it prints records/s (records = words entering the count), the median of --runs
runs, with and without reading the output back (``driver.read``), a ``Counter`` over
the same lines measured in the same run (median too) and the ratio of the two. It
checks that the driver's final counts equal the Counter's and that it emitted one
update per word. Nothing here is asserted on time.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import re
import runpy
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import make_zipf

from rstreams.testing import TopologyTestDriver

ROOT = Path(__file__).resolve().parents[1]
WORD = re.compile(r"\w+")


def time_counter(lines: list[str]) -> tuple[float, collections.Counter[str]]:
    t0 = time.perf_counter()
    counts = collections.Counter(w for line in lines for w in WORD.findall(line.lower()))
    return time.perf_counter() - t0, counts


def time_driver(lines: list[str], expected: collections.Counter[str]) -> tuple[float, float]:
    """Seconds piping ``lines``, and seconds reading the output back."""
    topology = runpy.run_path(str(ROOT / "examples" / "wordcount.py"))["build"]().build()
    with TopologyTestDriver(topology) as driver:
        t0 = time.perf_counter()
        for line in lines:
            driver.pipe("sentences", line)
        t1 = time.perf_counter()
        updates = len(driver.read("word-counts"))
        t2 = time.perf_counter()
        state = driver.state("wordcount-sentences-count-3-store")
    assert updates == sum(expected.values()), "the driver did not emit one update per word"
    assert state == dict(expected), "the driver's counts differ from Counter's"
    return t1 - t0, t2 - t1


def bench(name: str, lines: list[str], runs: int) -> None:
    base = [time_counter(lines) for _ in range(runs)]
    counts = base[0][1]
    words = sum(counts.values())
    t_base = statistics.median(t for t, _ in base)
    drv = [time_driver(lines, counts) for _ in range(runs)]
    t_drv = statistics.median(t for t, _ in drv)
    t_all = statistics.median(t + r for t, r in drv)
    base_rate, drv_rate, all_rate = words / t_base, words / t_drv, words / t_all
    print(f"{name}: {len(lines):,} lines, {words:,} words, {len(counts):,} distinct")
    print(f"  {'Counter':20}{t_base:10.3f} s{base_rate:14,.0f} records/s")
    print(
        f"  {'TopologyTestDriver':20}{t_drv:10.3f} s{drv_rate:14,.0f} records/s"
        f"   ratio to Counter {drv_rate / base_rate:.4f}"
    )
    print(
        f"  {'  with driver.read':20}{t_all:10.3f} s{all_rate:14,.0f} records/s"
        f"   ratio to Counter {all_rate / base_rate:.4f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--lines", type=int, default=0, help="lines per corpus (default: all of corpus.txt)"
    )
    ap.add_argument(
        "--mb", type=float, default=0, help="megabytes per corpus instead of --lines (e.g. 2)"
    )
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement (median; default 3)")
    ap.add_argument(
        "--short", action="store_true", help="only the short lines of the stdlib's source"
    )
    args = ap.parse_args()
    if args.short:
        lines = first_megabytes(stdlib_lines(), args.mb or 2)
        bench(f"short lines (stdlib source), {args.mb or 2:g} MB", lines, args.runs)
        return
    corpus = (ROOT / "examples" / "data" / "corpus.txt").read_text(encoding="utf-8").splitlines()
    if args.mb:
        lines = first_megabytes(itertools.cycle(corpus), args.mb)
        bench(f"corpus.txt repeated to {args.mb:g} MB", lines, args.runs)
    else:
        n = args.lines or len(corpus)
        bench("corpus.txt", corpus[:n], args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "zipf.txt"
        make_zipf(path, mb=args.mb or max(0.05, n * 80 / 1e6))
        zipf = path.read_text(encoding="utf-8").splitlines()
    if args.mb:
        bench(f"zipf, {args.mb:g} MB", first_megabytes(iter(zipf), args.mb), args.runs)
    else:
        bench("zipf", zipf[:n], args.runs)


def stdlib_lines() -> Iterator[str]:
    """The lines of the running Python's standard library source (sorted .py files)."""
    lib = Path(os.__file__).parent
    for path in sorted(lib.rglob("*.py")):
        if "site-packages" not in path.parts:
            yield from path.read_text(encoding="utf-8", errors="replace").splitlines()


def first_megabytes(lines: Iterator[str], mb: float) -> list[str]:
    """Lines from ``lines`` until they make ``mb`` megabytes (UTF-8, newlines counted)."""
    out, size = [], 0
    for line in lines:
        if size >= mb * 1e6:
            break
        out.append(line)
        size += len(line.encode("utf-8")) + 1
    return out


if __name__ == "__main__":
    main()
