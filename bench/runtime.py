"""Embedded runtime throughput and memory, as ratios measured in one run.

    python bench/runtime.py [--mb 100] [--repeat 3]

On a generated corpus of --mb megabytes (examples/data/corpus.txt repeated, with word
variants so the vocabulary grows), it times, best of --repeat runs each:

- baseline: ``collections.Counter`` over ``re.findall(r"\\w+", line.lower())``;
- ``rstreams run --in-memory`` (one process, memory queues);
- ``rstreams run --workers 1`` and ``--workers 2`` (the default: durable file log,
  exactly-once, RocksDB state, worker processes) of examples/wordcount.py (lambdas);
- ``--workers 1`` of examples/wordcount_spark.py (the same count with built-ins, which
  the embedded engine runs as C loops);

and prints words/s and the ratios (to Counter, and 2 workers / 1 worker). Then memory,
as the peak RSS of the worker process of a ``--workers 1`` run (sampled from /proc):

- the same vocabulary, input ten times larger: should stay about the same (bounded by
  the state, not the input);
- about ten times the keys, same input size: grows by at most the configured caches
  (``cache_entries`` entries per process, RocksDB's block cache and write buffers), not
  with the keys: the state lives in RocksDB on disk.

Every run's final table is checked against the Counter. Nothing is asserted on time.
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

from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.state.rocksdb import RocksDBConfig

ROOT = Path(__file__).resolve().parents[1]
LAMBDAS = ROOT / "examples" / "wordcount.py"
BUILTINS = ROOT / "examples" / "wordcount_spark.py"
WORD = re.compile(r"\w+")

# Runs a command in a child and reports the peak RSS (KiB) of its largest descendant.
_MEASURE = (
    "import resource, subprocess, sys, time;"
    "t = time.perf_counter(); r = subprocess.run(sys.argv[1:]);"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
    " r.returncode)"
)


def rstreams_run(pipeline: Path, corpus: Path, out: Path, *flags: str) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "rstreams", "run", str(pipeline), "--input", str(corpus),
           "--output", str(out), "-q", *flags]  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, check=True
    )
    seconds, rss, code = res.stdout.split()
    if code != "0":
        raise SystemExit(f"rstreams run failed: {res.stderr}")
    return float(seconds), int(rss)


def worker_peak_rss(pipeline: Path, corpus: Path, out: Path, data_dir: Path) -> int:
    """Peak RSS (KiB) of the worker processes of a ``--workers 1`` run: the process that
    holds the state. (The run's own process also builds the final table for --output,
    which grows with the keys whatever the engine does.) Sampled from /proc: Linux."""
    cmd = [sys.executable, "-m", "rstreams", "run", str(pipeline), "--input", str(corpus),
           "--output", str(out), "-q", "--workers", "1", "--data-dir", str(data_dir)]  # fmt: skip
    proc = subprocess.Popen(cmd)
    peak = 0
    # The run's own workers: its children (their configuration is not on their command line).
    parent = f"PPid:\t{proc.pid}\n"
    while proc.poll() is None:
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                cmdline = (status.parent / "cmdline").read_bytes()
                if (
                    b"rstreams.runtime.engine.coordination.worker" in cmdline
                    and parent in status.read_text()
                ):
                    for line in status.read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]))
            except OSError:
                continue  # gone meanwhile
        time.sleep(0.2)
    if proc.returncode:
        raise SystemExit(f"rstreams run failed ({proc.returncode})")
    return peak


def table(path: Path) -> dict[str, int]:
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return {r["key"]: r["value"] for r in rows}


def counter(path: Path) -> tuple[float, collections.Counter[str]]:
    t0 = time.perf_counter()
    with path.open(encoding="utf-8") as f:
        counts = collections.Counter(w for line in f for w in WORD.findall(line.lower()))
    return time.perf_counter() - t0, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0, help="corpus size in MB (default 100)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each, best kept (default 3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        big, small, plain, many = (tmp / f"{n}.txt" for n in ("big", "small", "plain", "many"))
        make_corpus(big, args.mb)
        # Memory is compared on inputs with the same vocabulary (state size), 10x apart,
        # and on inputs of the same size with about 10x the keys.
        make_corpus(plain, args.mb, grow_vocabulary=False)
        make_corpus(small, args.mb / 10, grow_vocabulary=False)
        make_corpus(many, args.mb, rename_every=3)

        t_base, counts = min(counter(big) for _ in range(args.repeat))
        words = sum(counts.values())
        expected = dict(counts)

        configs = [
            ("run --in-memory", LAMBDAS, ["--in-memory"]),
            ("run --workers 1", LAMBDAS, ["--workers", "1"]),
            ("run --workers 2", LAMBDAS, ["--workers", "2"]),
            ("  built-ins, --workers 1", BUILTINS, ["--workers", "1"]),
        ]
        best: dict[str, tuple[float, int]] = {}
        for r in range(args.repeat):  # interleaved: a busy moment hits every config alike
            for c, (label, pipeline, flags) in enumerate(configs):
                out = tmp / "out.jsonl"
                durable = "--in-memory" not in flags
                data = ["--data-dir", str(tmp / f"d{r}-{c}")] if durable else []
                seconds, rss = rstreams_run(pipeline, big, out, *flags, *data)
                assert table(out) == expected, f"{label}: wrong result"
                if label not in best or seconds < best[label][0]:
                    best[label] = (seconds, rss)

        def rss_of(corpus: Path, name: str) -> tuple[int, int]:
            out = tmp / f"{name}.jsonl"
            return worker_peak_rss(LAMBDAS, corpus, out, tmp / name), len(table(out))

        small_rss, _ = rss_of(small, "small")
        plain_rss, plain_keys = rss_of(plain, "plain")
        big_rss, big_keys = rss_of(big, "big")
        many_rss, many_keys = rss_of(many, "many")

    print(
        f"corpus: {args.mb:.0f} MB, {words:,} words, {len(counts):,} distinct; "
        f"best of {args.repeat}"
    )
    print(f"{'':26}{'seconds':>9}{'words/s':>12}{'/Counter':>10}{'peak RSS MB':>13}")
    print(f"{'Counter (baseline)':26}{t_base:9.2f}{words / t_base:12,.0f}{1:10.3f}")
    for label, (seconds, rss) in best.items():
        ratio = t_base / seconds
        print(f"{label:26}{seconds:9.2f}{words / seconds:12,.0f}{ratio:10.3f}{rss / 1024:13.1f}")
    one, two = best["run --workers 1"][0], best["run --workers 2"][0]
    print(f"2 workers / 1 worker speed-up: {one / two:.2f}x")
    print(
        f"worker peak RSS, same vocabulary ({plain_keys:,} keys), {args.mb:.0f} MB vs "
        f"{args.mb / 10:.0f} MB input: {plain_rss / 1024:.1f} MB vs {small_rss / 1024:.1f} MB, "
        f"ratio {plain_rss / small_rss:.2f} (target <= 1.2)"
    )
    rocks = RocksDBConfig()
    caches = rocks.block_cache_bytes / 2**20
    print(
        f"worker peak RSS, {many_keys / big_keys:.1f}x the keys ({big_keys:,} -> {many_keys:,}), "
        f"same input size: {big_rss / 1024:.1f} MB -> {many_rss / 1024:.1f} MB "
        f"(+{(many_rss - big_rss) / 1024:.1f} MB; configured: {EngineConfig().cache_entries:,} "
        f"cached entries per process, RocksDB block cache {caches:.0f} MB and "
        f"{rocks.max_write_buffers} x {rocks.write_buffer_bytes / 2**20:.0f} MB write buffers "
        "per store)"
    )


if __name__ == "__main__":
    main()
