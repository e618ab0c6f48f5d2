"""Word count on Spark: the rstreams DSL against hand-written PySpark, same corpus, one run.

    python bench/spark_wordcount.py [--mb 100] [--kind repeated,zipf] [--master local[*]]
                                    [--repeat 3] [--corpus PATH] [--keep]

Builds (or reuses, with --corpus) the corpora of bench/corpora.py, about --mb megabytes
each (repeated text, and Zipf-distributed words), starts one SparkSession (through
rstreams' own session code) and times, median of --repeat runs after a warm-up, each variant
from reading the file to a Python dict of the counts on the driver:

- native:      hand-written DataFrame word count: lower + regexp_extract_all + explode +
               groupBy().count(), with the same word regex the DSL emits (Python's \\w);
- native-ascii: the same with Java's plain ``\\w+`` (ASCII words; different counts on
               non-ASCII text, shown for reference only);
- dsl-builtin: examples/wordcount_spark.py (F.lower, F.words, F.identity) via run_spark;
- dsl-builtin-icu: the same with ``exact_unicode=False`` (Spark's own case mapping, no
               guard for the characters newer than Python's Unicode tables);
- mapInArrow:  hand-written ``mapInArrow`` splitting lines with re.findall in Python;
- dsl-lambda:  examples/wordcount.py (a user lambda does the split) via run_spark;
- rdd:         hand-written RDD ``flatMap`` + ``reduceByKey``.

It checks that the counts are equal and prints seconds, words/s and the two ratios the
Spark backend targets: dsl-builtin / native <= 1.10 and dsl-lambda / mapInArrow <= 1.20
(and dsl-lambda faster than rdd). Nothing here is asserted on time.
"""

from __future__ import annotations

import argparse
import operator
import re
import runpy
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from corpora import KINDS, make  # noqa: E402

from rstreams.runtime.spark import run_spark  # noqa: E402

WORD = re.compile(r"\w+")


def to_dict(df: Any) -> dict[str, int]:
    at = df.toArrow()
    return dict(zip(at.column(0).to_pylist(), at.column(1).to_pylist()))


def split_words(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    findall = WORD.findall
    for batch in batches:
        words = [w for line in batch.column(0).to_pylist() for w in findall(line.lower())]
        yield pa.RecordBatch.from_arrays([pa.array(words, pa.string())], names=["w"])


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0, help="corpus size in MB (default 100)")
    ap.add_argument(
        "--kind",
        default=",".join(KINDS),
        help="corpora to generate, comma-separated: repeated, zipf (default both)",
    )
    ap.add_argument("--corpus", help="use this corpus file instead of generating one")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per variant (median)")
    ap.add_argument("--split-mb", type=int, default=16, help="input split size in MB")
    ap.add_argument("--keep", action="store_true", help="keep the generated corpora")
    args = ap.parse_args()

    from rstreams.runtime.spark.session import get_session, stop_session

    spark, _ = get_session(
        args.master,
        app_name="rstreams-bench",
        conf={"spark.sql.files.maxPartitionBytes": f"{args.split_mb}m"},
    )
    tmp = Path(tempfile.mkdtemp(prefix="rstreams-bench-"))
    try:
        if args.corpus:
            bench(spark, Path(args.corpus), "given", args)
        for kind in [] if args.corpus else args.kind.split(","):
            corpus = tmp / f"{kind}.txt"
            t0 = time.perf_counter()
            make(kind, corpus, args.mb)
            print(f"generated {corpus} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            bench(spark, corpus, kind, args)
            if not args.keep:
                corpus.unlink()
    finally:
        stop_session(spark)


def bench(spark: Any, corpus: Path, kind: str, args: argparse.Namespace) -> None:
    """Time every variant on ``corpus``, interleaved, and print the table and ratios."""
    from pyspark.sql import functions as SF

    from rstreams.runtime.spark.native import calibrate, java_regex

    size_mb = corpus.stat().st_size / 1e6
    path = str(corpus)
    java_words = java_regex(r"\w+", 0, calibrate(spark))
    assert java_words is not None
    partitions = spark.read.text(path).rdd.getNumPartitions()

    wc_builtin = runpy.run_path(str(ROOT / "examples" / "wordcount_spark.py"))["build"]().build()
    wc_lambda = runpy.run_path(str(ROOT / "examples" / "wordcount.py"))["build"]().build()

    def native(pattern: str) -> Callable[[], dict[str, int]]:
        def run() -> dict[str, int]:
            words = SF.explode(SF.regexp_extract_all(SF.lower("value"), SF.lit(pattern), 0))
            df = spark.read.text(path).select(words.alias("w")).groupBy("w").count()
            return to_dict(df)

        return run

    def map_in_arrow() -> dict[str, int]:
        df = spark.read.text(path).mapInArrow(split_words, "w string").groupBy("w").count()
        return to_dict(df)

    def rdd() -> dict[str, int]:
        lines = spark.sparkContext.textFile(path, minPartitions=partitions)
        pairs = lines.flatMap(lambda line: WORD.findall(line.lower())).map(lambda w: (w, 1))
        return dict(pairs.reduceByKey(operator.add).collect())

    def dsl(topology: Any, exact: bool = True) -> Callable[[], dict[str, int]]:
        def run() -> dict[str, int]:
            result = run_spark(topology, {"sentences": path}, spark=spark, exact_unicode=exact)
            return result.tables["word-counts"]

        return run

    variants: dict[str, Callable[[], dict[str, int]]] = {
        "native": native(java_words[0]),
        "native-ascii": native(r"\w+"),
        "dsl-builtin": dsl(wc_builtin),
        "dsl-builtin-icu": dsl(wc_builtin, exact=False),
        "mapInArrow": map_in_arrow,
        "dsl-lambda": dsl(wc_lambda),
        "rdd": rdd,
    }
    # Warm up the JVM (JIT) and the Python workers on a slice of the input.
    warm = corpus.with_name(f"warm-{corpus.name}")
    with corpus.open(encoding="utf-8") as src, warm.open("w", encoding="utf-8") as dst:
        for _, line in zip(range(50_000), src):
            dst.write(line)
    saved, path = path, str(warm)
    for run in variants.values():
        run()
    path = saved
    warm.unlink()

    times: dict[str, list[float]] = {name: [] for name in variants}
    results: dict[str, dict[str, int]] = {}
    for _ in range(args.repeat):
        for name, run in variants.items():  # interleaved: drift hits every variant alike
            t0 = time.perf_counter()
            results[name] = run()
            times[name].append(time.perf_counter() - t0)

    reference = results["native"]
    for name, counts in results.items():
        if name != "native-ascii":
            assert counts == reference, f"{name} counts differ from the native ones!"
    words = sum(reference.values())
    median = {name: statistics.median(ts) for name, ts in times.items()}
    cores = spark.sparkContext.defaultParallelism
    print(
        f"corpus {kind}: {size_mb:.1f} MB, {words:,} words, {len(reference):,} distinct; "
        f"Spark {spark.version} {args.master} ({cores} cores), {partitions} input splits, "
        f"median of {args.repeat}"
    )
    print(f"{'variant':16}{'median s':>9}{'best s':>9}{'Mwords/s':>10}")
    for name in variants:
        print(
            f"{name:16}{median[name]:9.2f}{min(times[name]):9.2f}{words / median[name] / 1e6:10.2f}"
        )
    r1 = median["dsl-builtin"] / median["native"]
    r1b = median["dsl-builtin-icu"] / median["native"]
    r2 = median["dsl-lambda"] / median["mapInArrow"]
    r3 = median["dsl-lambda"] / median["rdd"]
    print(f"dsl-builtin / native       = {r1:.3f}  (target <= 1.10)")
    print(f"  with exact_unicode=False = {r1b:.3f}")
    print(f"dsl-lambda  / mapInArrow   = {r2:.3f}  (target <= 1.20)")
    print(f"dsl-lambda  / rdd          = {r3:.3f}  (target < 1)")
    print()


if __name__ == "__main__":
    main()
