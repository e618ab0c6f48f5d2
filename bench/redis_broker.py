"""Redis broker vs file log: word-count throughput, commit latency and redis-server memory.

    python bench/redis_broker.py [--mb 20] [--repeat 3] [--no-everysec] [--memory 10,20,40]

On both corpora (bench/corpora.py: repeated text and Zipf), of --mb megabytes (at most
50), it runs ``rstreams run examples/wordcount.py --workers N`` for N = 1 and 2 with:

- ``file``: the durable file log (the default);
- ``redis``: ``--broker redis://...``, a redis-server started by this script for the run
  with ``appendonly yes`` and ``appendfsync always`` (an acknowledged write survives a
  crash of the host);
- ``everysec``: the same with ``appendfsync everysec`` (a second of writes at risk).

Runs are interleaved (a busy moment of the shared machine hits every variant alike) and
the median of --repeat is kept. It prints words/s, the Redis ÷ file-log ratios (target
≥ 0.7), the commit latency p50/p99 (the upper bound of the histogram bucket, from the
workers' statistics files, sampled while they run) and redis-server's peak memory
(``INFO memory`` ``used_memory_peak``) and what is left at the end, and the script calls
(round trips) the server ran. Then, with --memory, the peak memory of ``--workers 1``
Redis runs on Zipf inputs of those sizes: whether it grows with the input. Every table is
checked against ``Counter`` (exact). Nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # (the tests' redis-server helper)
from corpora import KINDS, make  # noqa: E402
from runtime import counter, table  # noqa: E402

from rstreams.live.render import _quantile  # noqa: E402
from tests.helpers.redisserver import RedisServer  # noqa: E402

WORDCOUNT = ROOT / "examples" / "wordcount.py"
VARIANTS = ("file", "redis", "everysec")


@contextmanager
def redis_server(directory: Path, variant: str) -> Iterator[RedisServer | None]:
    """A fresh server per run (so that its peak memory is this run's), or None."""
    if variant == "file":
        yield None
        return
    extra = ("--appendfsync", "everysec") if variant == "everysec" else ()
    server = RedisServer(directory, extra=extra).start()
    try:
        yield server
    finally:
        server.stop()


def watch_commits(proc: subprocess.Popen[Any], stats: Path) -> dict[str, dict[str, Any]]:
    """The commit histogram of each worker of a run, read from its statistics files in
    ``stats`` until ``proc`` ends (a worker deletes its file when it leaves: the last one
    seen is kept)."""
    commits: dict[str, dict[str, Any]] = {}
    while proc.poll() is None:
        for path in stats.glob("worker-*.json"):
            try:
                commits[path.name] = json.loads(path.read_text())["commits"]
            except (OSError, ValueError, KeyError):
                continue  # being rewritten
        time.sleep(0.2)
    return commits


def merge_commits(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The commit histograms of every worker, added up."""
    count, total = 0, 0.0
    buckets: dict[Any, int] = {}
    for doc in docs.values():
        count += doc["count"]
        total += doc["seconds_sum"]
        for bound, n in doc["buckets"]:
            buckets[bound] = buckets.get(bound, 0) + n
    return {"count": count, "seconds_sum": total, "buckets": list(buckets.items())}


def run_once(corpus: Path, out: Path, data: Path, workers: int, variant: str) -> dict[str, Any]:
    """One run: seconds, commit histogram, redis-server memory (peak, at the end)."""
    with redis_server(data.parent / f"{data.name}-redis", variant) as server:
        broker = ["--broker", server.url] if server else []
        cmd = [sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), "--input", str(corpus),
               "--output", str(out), "-q", "--workers", str(workers), "--data-dir", str(data),
               *broker]  # fmt: skip
        stats = data / "wordcount" / "coordination" / "wordcount" / "stats"
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        commits = watch_commits(proc, stats)
        seconds = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(f"rstreams run failed: {proc.stderr.read() if proc.stderr else ''}")
        memory: dict[str, int] = {}
        if server:
            client = redis.Redis.from_url(server.url)
            info = client.info("memory")
            memory = {"peak": int(info["used_memory_peak"]), "end": int(info["used_memory"])}
            memory["scripts"] = script_calls(client.info("commandstats"))
    return {"seconds": seconds, "commits": merge_commits(commits), **memory}


def script_calls(stats: dict[str, Any]) -> int:
    """Script calls (EVALSHA and EVAL) the server ran: a round trip each, and where
    nearly all of a run's server time goes."""
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


def quantiles_ms(commits: dict[str, Any]) -> str:
    q = [_quantile(commits, p) for p in (0.5, 0.99)]
    return "/".join("-" if v is None else f"{v * 1000:.0f}" for v in q)


def bench_corpus(kind: str, mb: float, repeat: int, variants: tuple[str, ...], tmp: Path) -> None:
    corpus = tmp / f"{kind}.txt"
    make(kind, corpus, mb)
    _, counts = counter(corpus)
    expected, words = dict(counts), sum(counts.values())
    results: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in range(repeat):  # interleaved
        for workers in (1, 2):
            for variant in variants:
                out, data = tmp / "out.jsonl", tmp / f"d-{kind}-{r}-{workers}-{variant}"
                res = run_once(corpus, out, data, workers, variant)
                assert table(out) == expected, f"{kind} {variant} x{workers}: wrong result"
                results.setdefault((workers, variant), []).append(res)
    print(f"\n{kind}: {mb:g} MB, {words:,} words, {len(counts):,} distinct; median of {repeat}")
    print(f"{'':20}{'seconds':>9}{'words/s':>11}{'÷ file':>8}{'commit ms p50/p99':>19}"
          f"{'redis peak MB':>15}{'at end MB':>11}{'scripts':>9}")  # fmt: skip
    for workers in (1, 2):
        base = statistics.median(x["seconds"] for x in results[(workers, "file")])
        for variant in variants:
            runs = results[(workers, variant)]
            sec = statistics.median(x["seconds"] for x in runs)
            mid = sorted(runs, key=lambda x: x["seconds"])[len(runs) // 2]
            mem = (f"{statistics.median(x['peak'] for x in runs) / 1e6:15.1f}"
                   f"{statistics.median(x['end'] for x in runs) / 1e6:11.1f}"
                   f"{statistics.median(x['scripts'] for x in runs):9,.0f}"
                   if "peak" in mid else "")  # fmt: skip
            print(f"{f'{variant}, {workers} worker(s)':20}{sec:9.2f}{words / sec:11,.0f}"
                  f"{base / sec:8.2f}{quantiles_ms(mid['commits']):>19}{mem}")  # fmt: skip


def bench_memory(sizes: list[float], tmp: Path) -> None:
    """redis-server's peak memory against input size (Zipf, --workers 1)."""
    print("\nredis-server memory against input (zipf, --workers 1, appendfsync always)")
    print(f"{'input MB':>9}{'peak MB':>9}{'at end MB':>11}{'peak ÷ input':>14}")
    for mb in sizes:
        corpus = tmp / f"mem-{mb:g}.txt"
        make("zipf", corpus, mb)
        _, counts = counter(corpus)
        res = run_once(corpus, tmp / "out.jsonl", tmp / f"m-{mb:g}", 1, "redis")
        assert table(tmp / "out.jsonl") == dict(counts), f"memory {mb} MB: wrong result"
        size = corpus.stat().st_size / 1e6
        print(f"{size:9.1f}{res['peak'] / 1e6:9.1f}{res['end'] / 1e6:11.1f}"
              f"{res['peak'] / 1e6 / size:14.2f}")  # fmt: skip
        corpus.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=20.0, help="corpus size in MB (default 20)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each, median kept")
    ap.add_argument("--no-everysec", action="store_true", help="skip appendfsync everysec")
    ap.add_argument("--corpora", default=",".join(KINDS), help="comma-separated kinds")
    ap.add_argument("--memory", default="", help="input sizes (MB) for the memory runs")
    args = ap.parse_args()
    if args.mb > 50:
        ap.error("--mb is at most 50")
    variants = VARIANTS[:2] if args.no_everysec else VARIANTS
    with open("/proc/loadavg") as f:
        print(f"load average at start: {' '.join(f.read().split()[:3])}")
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        for kind in filter(None, args.corpora.split(",")):  # (--corpora "": memory only)
            bench_corpus(kind, args.mb, args.repeat, variants, tmp)
        if args.memory:
            bench_memory([float(x) for x in args.memory.split(",")], tmp)
    with open("/proc/loadavg") as f:
        print(f"load average at end: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    main()
