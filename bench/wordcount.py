"""Word count throughput: rstreams vs plain collections.Counter on the same file.

    python bench/wordcount.py [--mb 20]

Builds a corpus of about --mb megabytes by repeating examples/data/corpus.txt (with
per-copy word suffixes, so the key set grows like real text), then times, in one run:

- baseline: ``Counter`` over ``re.findall(r"\\w+", line.lower())`` of each line;
- rstreams: ``rstreams.run`` of examples/wordcount.py (in-process engine, shuffle of
  8 queues, write-back state, coalesced emits);
- driver: the TopologyTestDriver (record at a time) on the first 1% of lines.

and prints words/s for each and the ratios to the baseline. It also checks that the
results are equal. Nothing here is asserted on time.
"""

from __future__ import annotations

import argparse
import collections
import re
import runpy
import tempfile
import time
from pathlib import Path

import rstreams
from rstreams.testing import TopologyTestDriver

ROOT = Path(__file__).resolve().parents[1]
WORD = re.compile(r"\w+")


def make_corpus(path: Path, mb: float, grow_vocabulary: bool = True, rename_every: int = 0) -> None:
    """About ``mb`` MB of examples/data/corpus.txt copies. With ``grow_vocabulary``,
    three copies in four rename a word per line (one of 97 variants), so the vocabulary
    grows like real text; ``rename_every=N`` instead renames every N-th word of each
    line with the copy's number: many more keys (N=3: ten times as many)."""
    base = (ROOT / "examples" / "data" / "corpus.txt").read_text(encoding="utf-8").splitlines()
    target = int(mb * 1_000_000)
    size, copy = 0, 0
    with path.open("w", encoding="utf-8") as f:
        while size < target:
            for i, line in enumerate(base):
                if rename_every:
                    words = line.split(" ")
                    tag = f"_{copy}_{i % 7}"
                    words[::rename_every] = [w + tag for w in words[::rename_every]]
                    text = " ".join(words)
                elif grow_vocabulary and copy % 4:
                    text = line.replace("e", f"e{copy % 97}", 1)
                else:
                    text = line
                f.write(text + "\n")
                size += len(text) + 1
            copy += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=20.0, help="corpus size in MB (default 20)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        make_corpus(corpus, args.mb)
        size_mb = corpus.stat().st_size / 1e6

        t0 = time.perf_counter()
        with corpus.open(encoding="utf-8") as f:
            counts = collections.Counter(w for line in f for w in WORD.findall(line.lower()))
        t_base = time.perf_counter() - t0
        words = sum(counts.values())

        topology = runpy.run_path(str(ROOT / "examples" / "wordcount.py"))["build"]().build()
        t0 = time.perf_counter()
        result = rstreams.run(topology, {"sentences": str(corpus)})
        t_run = time.perf_counter() - t0
        assert result.tables["word-counts"] == dict(counts), "rstreams result differs!"

        lines = corpus.read_text(encoding="utf-8").splitlines()[: max(1, len(counts) // 10)]
        sample_words = sum(len(WORD.findall(line.lower())) for line in lines)
        t0 = time.perf_counter()
        with TopologyTestDriver(topology) as driver:
            for line in lines:
                driver.pipe("sentences", line)
        t_driver = time.perf_counter() - t0

    base_rate = words / t_base
    run_rate = words / t_run
    drv_rate = sample_words / t_driver
    print(f"corpus: {size_mb:.1f} MB, {words:,} words, {len(counts):,} distinct")
    print(f"{'':24}{'seconds':>10}{'words/s':>14}{'ratio':>8}")
    print(f"{'Counter (baseline)':24}{t_base:10.2f}{base_rate:14,.0f}{1:8.3f}")
    print(f"{'rstreams.run':24}{t_run:10.2f}{run_rate:14,.0f}{run_rate / base_rate:8.3f}")
    print(f"{'TopologyTestDriver':24}{t_driver:10.2f}{drv_rate:14,.0f}{drv_rate / base_rate:8.3f}")


if __name__ == "__main__":
    main()
