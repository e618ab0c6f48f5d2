"""Word count in every mode against collections.Counter, on both corpora, for the docs.

    python bench/plots.py [--mb 20] [--runs 3] [--no-spark] [--out DIR]

For each corpus of bench/corpora.py (``repeated`` prose and ``zipf``, about --mb MB
each) it runs, --runs rounds, every mode once per round in this order (interleaved:
drift in the machine's load hits every mode alike):

- ``Counter``: ``collections.Counter`` over ``re.findall(r"\\w+", line.lower())``;
- ``in-memory``: ``rstreams.run`` of examples/wordcount.py in this process (memory
  queues, nothing kept: what ``rstreams run --in-memory`` runs);
- ``workers 1``, ``workers 2``: ``rstreams run --workers N`` of examples/wordcount.py
  (the CLI's default runtime: durable file log, exactly-once, RocksDB state, worker
  processes), fresh data dir each run, process start included;
- ``built-ins, workers 2``: the same with examples/wordcount_spark.py (``F.lower()``,
  ``F.words()``, ``F.identity()``: evaluated a batch at a time);
- ``Spark local[*]``: examples/wordcount.py (the lambda) through ``run_spark`` on one
  SparkSession started before the rounds and warmed up (as bench/spark_wordcount.py's
  ``dsl-lambda``); left out with ``--no-spark``.

Every table is checked against Counter's. A mode's ratio is Counter's time over its
time (1.0 is Counter's speed), from the medians over the rounds. Also kept: CPU
seconds (user + sys of the process and the children it waited for; Spark's JVM is not
counted) and, for the ``--workers 2`` modes, the peak RSS of the whole process tree
(the run, its supervisor and workers; sampled from /proc every 0.25 s, Linux).
It writes wordcount.json and draws wordcount.png (ratios) into --out
(docs/assets/bench by default) for docs/benchmarks.md. Nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import re
import resource
import runpy
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import make as make_corpus_of

import rstreams

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "assets" / "bench"
WORD = re.compile(r"\w+")
LAMBDA = ROOT / "examples" / "wordcount.py"
BUILTINS = ROOT / "examples" / "wordcount_spark.py"
SPARK = "Spark local[*]"
MODES = ("in-memory", "workers 1", "workers 2", "built-ins, workers 2", SPARK)

#: What a mode's run gives: the table, CPU seconds, peak RSS (KiB) or None.
Run = tuple[dict[str, int], float, int | None]


def counter(path: Path) -> collections.Counter[str]:
    c: collections.Counter[str] = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            c.update(WORD.findall(line.lower()))
    return c


def in_process(fn: Callable[[], dict[str, int]]) -> Run:
    cpu = time.process_time()
    table = fn()
    return table, time.process_time() - cpu, None


def in_memory(path: Path) -> dict[str, int]:
    topology = runpy.run_path(str(LAMBDA))["build"]().build()
    return rstreams.run(topology, {"sentences": str(path)}).tables["word-counts"]


def _proc_table() -> dict[int, tuple[int, int, int]]:
    """Per process: (parent, VmRSS KiB, VmHWM KiB), from /proc (Linux)."""
    table: dict[int, tuple[int, int, int]] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue  # gone meanwhile
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        rss, hwm = (int(fields.get(f, "0 kB").split()[0]) for f in ("VmRSS", "VmHWM"))
        table[int(fields["Pid"])] = (int(fields["PPid"]), rss, hwm)
    return table


class TreeSampler:
    """Samples the process tree of a running ``subprocess.Popen`` every ``every`` s until
    it ends: the peak of the tree's summed RSS, and each process's own peak (VmHWM, the
    kernel's high-water mark, so nothing between samples is missed) with its role
    (``supervisor``: the root, ``worker``, or ``other``)."""

    def __init__(self, proc: subprocess.Popen[bytes], every: float = 0.25) -> None:
        self.proc, self.every = proc, every
        self.tree_peak_kib = 0
        self.peaks: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self.proc.poll() is None:
            self.sample()
            time.sleep(self.every)

    def sample(self) -> None:
        table = _proc_table()
        children: dict[int, list[int]] = collections.defaultdict(list)
        for pid, (ppid, _, _) in table.items():
            children[ppid].append(pid)
        total, todo = 0, [self.proc.pid]
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            if pid not in table:
                continue
            total += table[pid][1]
            self.peaks[pid] = max(self.peaks.get(pid, 0), table[pid][2])
            if pid not in self.roles:
                self.roles[pid] = _role(pid, self.proc.pid)
        self.tree_peak_kib = max(self.tree_peak_kib, total)

    def join(self) -> None:
        self._thread.join()

    def peak_kib(self, role: str) -> int:
        """The largest own peak among the processes of ``role``."""
        return max((kib for pid, kib in self.peaks.items() if self.roles[pid] == role), default=0)


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "supervisor"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "other"
    return "worker" if b"rstreams.runtime.engine.coordination.worker" in cmdline else "other"


def run_cli(path: Path, workers: int, pipeline: Path) -> tuple[dict[str, int], TreeSampler]:
    """``rstreams run PIPELINE --workers N --output`` in a fresh data dir: its table, and
    its process tree's memory as sampled while it ran."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out.jsonl"
        proc = subprocess.Popen(
            [sys.executable, "-m", "rstreams", "run", str(pipeline), "--input", str(path),
             "--workers", str(workers), "--data-dir", d, "--output", str(out), "-q"],
        )  # fmt: skip
        sampler = TreeSampler(proc)
        if proc.wait():
            raise SystemExit(f"rstreams run {pipeline.name} --workers {workers} failed")
        sampler.join()
        rows = map(json.loads, out.read_text(encoding="utf-8").splitlines())
        return {r["key"]: r["value"] for r in rows}, sampler


def durable(path: Path, workers: int, pipeline: Path, sample_rss: bool) -> Run:
    """``rstreams run --workers N`` in a fresh data dir: its table, CPU seconds (the
    process tree's) and, if ``sample_rss``, the tree's peak RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    table, sampler = run_cli(path, workers, pipeline)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return table, cpu, sampler.tree_peak_kib if sample_rss else None


def spark_mode(master: str) -> tuple[Callable[[Path], Run], Callable[[], None]]:
    """A mode running the DSL lambda word count on one SparkSession, and its stop."""
    from rstreams.runtime.spark import run_spark
    from rstreams.runtime.spark.session import get_session, stop_session

    spark, _ = get_session(master, app_name="rstreams-bench-plots")
    topology = runpy.run_path(str(LAMBDA))["build"]().build()

    def run(path: Path) -> Run:
        return in_process(
            lambda: run_spark(topology, {"sentences": str(path)}, spark=spark).tables["word-counts"]
        )

    return run, lambda: stop_session(spark)


def modes(spark: Callable[[Path], Run] | None) -> dict[str, Callable[[Path], Run]]:
    chosen: dict[str, Callable[[Path], Run]] = {
        "in-memory": lambda p: in_process(lambda: in_memory(p)),
        "workers 1": lambda p: durable(p, 1, LAMBDA, False),
        "workers 2": lambda p: durable(p, 2, LAMBDA, True),
        "built-ins, workers 2": lambda p: durable(p, 2, BUILTINS, True),
    }
    if spark is not None:
        chosen[SPARK] = spark
    return chosen


def measure(path: Path, runs: int, spark: Callable[[Path], Run] | None) -> dict[str, Any]:
    """Every mode ``runs`` times on ``path``, interleaved; medians and ratios."""
    expected = dict(counter(path))
    words = sum(expected.values())
    todo = modes(spark)
    if spark is not None:
        spark(path)  # warm-up: the JVM's JIT and Spark's Python workers
    seconds: dict[str, list[float]] = {m: [] for m in ("Counter", *todo)}
    cpu: dict[str, list[float]] = {m: [] for m in seconds}
    rss: dict[str, list[int]] = {}
    for _ in range(runs):
        start, cpu0 = time.perf_counter(), time.process_time()
        counter(path)
        seconds["Counter"].append(time.perf_counter() - start)
        cpu["Counter"].append(time.process_time() - cpu0)
        for mode, fn in todo.items():
            start = time.perf_counter()
            table, used, peak = fn(path)
            seconds[mode].append(time.perf_counter() - start)
            cpu[mode].append(used)
            assert table == expected, f"{mode}: the table differs from Counter's"
            if peak is not None:
                rss.setdefault(mode, []).append(peak)
    median = {m: statistics.median(t) for m, t in seconds.items()}
    return {
        "words": words,
        "keys": len(expected),
        "seconds": median,
        "all_seconds": seconds,
        "cpu_seconds": {m: statistics.median(t) for m, t in cpu.items()},
        "ratio": {m: median["Counter"] / median[m] for m in todo},
        "words_per_s": {m: words / t for m, t in median.items()},
        "peak_rss_mb": {m: max(v) / 1024 for m, v in rss.items()},
    }


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in MODES if all(m in r["ratio"] for r in results.values())]
    fig, ax = plt.subplots(figsize=(8, 3.8), dpi=120)
    width = 0.38
    for i, (corpus, r) in enumerate(results.items()):
        xs = [j + (i - 0.5) * width for j in range(len(shown))]
        bars = ax.bar(xs, [r["ratio"][m] for m in shown], width, label=corpus)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(shown)), [m.replace(", ", ",\n") for m in shown], fontsize=8)
    ax.set_ylabel("speed / collections.Counter")
    top = max(r["ratio"][m] for r in results.values() for m in shown)
    ax.set_ylim(0, max(1.1, top * 1.15))
    ax.set_title("Word count, fraction of Counter's speed (median of runs)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0, help="size of each corpus (default 20)")
    ap.add_argument("--runs", type=int, default=3, help="rounds, median kept (default 3)")
    ap.add_argument("--out", type=Path, default=OUT, help="where the JSON and PNG go")
    ap.add_argument(
        "--spark",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also Spark local[*] (starts a JVM; default on)",
    )
    args = ap.parse_args(argv)
    spark, stop = spark_mode("local[*]") if args.spark else (None, None)
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for corpus in ("repeated", "zipf"):
                path = Path(tmp) / f"{corpus}.txt"
                make_corpus_of(corpus, path, args.mb)
                results[corpus] = r = measure(path, args.runs, spark)
                print(
                    f"{corpus:9} {args.mb:g} MB, {r['words']:,} words, {r['keys']:,} keys: "
                    + ", ".join(f"{m} {x:.3f}" for m, x in r["ratio"].items())
                    + " of Counter",
                    flush=True,
                )
    finally:
        if stop is not None:
            stop()
    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
        "load_average": os.getloadavg(),
        "mb": args.mb,
        "runs": args.runs,
        "results": results,
    }
    (args.out / "wordcount.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(results, args.out / "wordcount.png")
    print(f"wrote {args.out / 'wordcount.json'} and {args.out / 'wordcount.png'}")


if __name__ == "__main__":
    main()
