"""Wall time of a whole word-count command on Spark: the rstreams CLI against hand-written
PySpark scripts, each a fresh process that starts (and stops) its own local Spark.

    python bench/spark_cli.py [--input examples/data/corpus.txt] [--repeat 3]

Variants, run interleaved, median of --repeat runs each, every one writing the table:

- cli-lambda:   ``rstreams run examples/wordcount.py --backend spark``;
- cli-builtin:  ``rstreams run examples/wordcount_spark.py --backend spark``;
- script-df:    a hand-written PySpark script: ``lower`` + ``regexp_extract_all(\\w+)`` +
                ``explode`` + ``groupBy().count()``, collected and written as JSON lines;
- script-rdd:   a hand-written PySpark script: ``textFile`` + ``flatMap(re.findall)`` +
                ``reduceByKey``, collected and written;
- embedded:     ``rstreams run examples/wordcount.py`` on the embedded runtime (for scale).

Every table is checked against ``collections.Counter`` (script-df counts Java's ASCII
``\\w`` words: only its 100 most common words are checked). Nothing here is asserted on time.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RSTREAMS = Path(sys.executable).parent / "rstreams"
WORD = re.compile(r"\w+")

SCRIPT_DF = """
import json, sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master("local[*]").appName("wc-df").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
words = F.explode(F.regexp_extract_all(F.lower("value"), F.lit(r"\\w+"), 0)).alias("w")
rows = spark.read.text(sys.argv[1]).select(words).groupBy("w").count().collect()
with open(sys.argv[2], "w") as f:
    for r in rows:
        f.write(json.dumps({"key": r[0], "value": r[1]}) + "\\n")
spark.stop()
"""

SCRIPT_RDD = """
import json, re, sys
from operator import add
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[*]").appName("wc-rdd").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
word = re.compile(r"\\w+")
counts = (spark.sparkContext.textFile(sys.argv[1])
          .flatMap(lambda line: word.findall(line.lower()))
          .map(lambda w: (w, 1)).reduceByKey(add).collect())
with open(sys.argv[2], "w") as f:
    for k, v in counts:
        f.write(json.dumps({"key": k, "value": v}) + "\\n")
spark.stop()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--input", default=str(ROOT / "examples" / "data" / "corpus.txt"))
    ap.add_argument("--repeat", type=int, default=3, help="runs per variant (median)")
    args = ap.parse_args()
    corpus = Path(args.input).resolve()
    text = corpus.read_text(encoding="utf-8")
    expected = collections.Counter(w for ln in text.splitlines() for w in WORD.findall(ln.lower()))

    tmp = Path(tempfile.mkdtemp(prefix="rstreams-bench-cli-"))
    (tmp / "df.py").write_text(SCRIPT_DF)
    (tmp / "rdd.py").write_text(SCRIPT_RDD)
    out = tmp / "out.jsonl"
    # A hand-written script must name its workers' interpreter too (or PATH's python3
    # runs them); rstreams does that itself.
    script_env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    run = [RSTREAMS, "run", "--input", corpus, "--output", out, "-q"]
    variants = {
        "cli-lambda": ([*run, ROOT / "examples" / "wordcount.py", "--backend", "spark"], None),
        "cli-builtin": (
            [*run, ROOT / "examples" / "wordcount_spark.py", "--backend", "spark"],
            None,
        ),
        "script-df": ([sys.executable, tmp / "df.py", corpus, out], script_env),
        "script-rdd": ([sys.executable, tmp / "rdd.py", corpus, out], script_env),
        "embedded": (
            [*run, ROOT / "examples" / "wordcount.py", "--data-dir", tmp / "data", "--fresh"],
            None,
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeat):
        for name, (cmd, env) in variants.items():
            out.unlink(missing_ok=True)
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
            times[name].append(time.perf_counter() - t0)
            if r.returncode != 0:
                sys.exit(f"{name} failed:\n{r.stderr[-3000:]}")
            table = {}
            for line in out.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                table[row["key"]] = row["value"]
            if name == "script-df":  # Java's \w is ASCII-only: the top words agree
                top = [k for k, _ in expected.most_common(100)]
                assert {k: table.get(k) for k in top} == {k: expected[k] for k in top}
            else:
                assert table == dict(expected), f"{name}: table differs from Counter"
    print(
        f"input {corpus.name}: {corpus.stat().st_size / 1e6:.2f} MB, "
        f"{sum(expected.values()):,} words; median of {args.repeat} (seconds, whole command)"
    )
    for name, ts in times.items():
        print(f"{name:12}{statistics.median(ts):8.2f}   runs: {', '.join(f'{t:.2f}' for t in ts)}")
    cli = statistics.median(times["cli-lambda"])
    for ref in ("script-df", "script-rdd"):
        print(f"cli-lambda / {ref:10} = {cli / statistics.median(times[ref]):.2f}")


if __name__ == "__main__":
    main()
