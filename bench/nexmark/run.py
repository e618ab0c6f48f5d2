"""Nexmark on every mode against the plain-Python baseline, in one run.

For each query, ``--repeat`` rounds of: the baseline (bench/nexmark/baseline.py), then
``rstreams run examples/nexmark/qN.py`` on each mode, each writing its table to a file
(reading the results is part of what a user waits for), every table compared with the
baseline's (a mismatch is reported, and the script exits 1 at the end). Printed per
query and mode: the median wall time, events per second, the share of the baseline's
speed (1.0: as fast as plain Python; medians over the same rounds), the peak RSS of the
largest process, and for ``redis`` (``--workers 2 --broker``, a redis-server started
here) the commit latency p50/p99 from the workers' statistics.

Modes: ``in-memory``, ``workers1``, ``workers2``, ``redis`` and ``spark``
(``--backend spark``, ``local[*]``: its start-up of about 10 s included).

    python bench/nexmark/generate.py --events 1000000 --out /tmp/events.jsonl
    python bench/nexmark/run.py /tmp/events.jsonl --repeat 3
    python bench/nexmark/run.py /tmp/events.jsonl --queries q5 q7 --modes in-memory workers2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # (the tests' redis-server helper)
sys.path.insert(0, str(ROOT / "bench"))

from joins import _MEASURE, available  # noqa: E402
from redis_broker import merge_commits, quantiles_ms, watch_commits  # noqa: E402

QUERIES = ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11"]
MODES = {
    "in-memory": ["--in-memory"],
    "workers1": ["--workers", "1"],
    "workers2": ["--workers", "2"],
    "redis": ["--workers", "2"],
    "spark": ["--backend", "spark"],
}


def measure(cmd: list[str], stats: Path | None = None) -> tuple[float, int, dict[str, Any]]:
    """Run ``cmd``: (seconds, peak RSS KiB, the workers' commit histogram summed, read
    from ``stats`` while it runs: a worker deletes its file when it leaves)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _MEASURE, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    commits = {} if stats is None else watch_commits(proc, stats)
    out, err = proc.communicate()
    seconds, rss, code = out.split()
    if code != "0":
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return float(seconds), int(rss), merge_commits(commits)


@contextmanager
def redis_server(tmp: Path, wanted: bool) -> Iterator[str | None]:
    if not wanted:
        yield None
        return
    from tests.helpers.redisserver import RedisServer

    server = RedisServer(tmp / "redis").start()
    try:
        yield server.url
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("events")
    p.add_argument("--queries", nargs="+", default=QUERIES, choices=QUERIES)
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    with open(args.events, "rb") as f:
        lines = sum(1 for _ in f)
    mb = Path(args.events).stat().st_size / 1e6
    modes = [m for m in args.modes if available(m)]
    for m in sorted(set(args.modes) - set(modes)):
        print(f"{m}: skipped (not installed here)")
    print(f"{lines:,} events ({mb:.0f} MB); median of {args.repeat}", flush=True)
    print(f"{'query':6}{'mode':11}{'wall s':>8}{'events/s':>11}{'share':>7}"
          f"{'peak RSS MB':>13}{'commit ms p50/p99':>19}", flush=True)  # fmt: skip
    mismatch = False
    with (
        tempfile.TemporaryDirectory() as tmp_name,
        redis_server(Path(tmp_name), "redis" in modes) as redis_url,
    ):
        tmp = Path(tmp_name)
        plain_out, out = tmp / "plain.jsonl", tmp / "out.jsonl"
        for q in args.queries:
            base = [sys.executable, str(ROOT / "bench" / "nexmark" / "baseline.py"), q,
                    args.events, str(plain_out)]  # fmt: skip
            run = [sys.executable, "-m", "rstreams", "run",
                   str(ROOT / "examples" / "nexmark" / f"{q}.py"), "--input", args.events,
                   "--output", str(out), "-q"]  # fmt: skip
            cmds: dict[str, tuple[list[str], Path | None]] = {}
            for mode in modes:
                cmd, stats = [*run, *MODES[mode]], None
                if mode in ("workers1", "workers2", "redis"):
                    data = tmp / "d"
                    cmd += ["--data-dir", str(data), "--fresh"]
                    job = f"nexmark-{q}"
                    stats = data / job / "coordination" / job / "stats"
                if mode == "redis":
                    cmd += ["--broker", str(redis_url)]
                    cmds[mode] = (cmd, stats)
                else:
                    cmds[mode] = (cmd, None)
            plains: list[float] = []
            walls: dict[str, list[float]] = {m: [] for m in modes}
            rss = dict.fromkeys(modes, 0)
            commits: dict[str, dict[str, Any]] = {}
            for _ in range(args.repeat):
                # A round: the baseline, then each mode, so that every mode's median is
                # paired with the baseline's of the same rounds (the machine's pace).
                plains.append(measure(base)[0])
                for mode, (cmd, stats) in cmds.items():
                    wall, peak, hist = measure(cmd, stats)
                    walls[mode].append(wall)
                    rss[mode] = max(rss[mode], peak)
                    if hist["count"]:
                        commits[mode] = hist
                    if out.read_bytes() != plain_out.read_bytes():
                        mismatch = True
                        print(f"{q} {mode}: MISMATCH with the plain-Python table", flush=True)
            plain = statistics.median(plains)
            print(f"{q:6}{'plain':11}{plain:8.2f}{lines / plain:11,.0f}{1:7.2f}", flush=True)
            for mode in modes:
                wall = statistics.median(walls[mode])
                latency = quantiles_ms(commits[mode]) if mode in commits else "-"
                print(f"{q:6}{mode:11}{wall:8.2f}{lines / wall:11,.0f}{plain / wall:7.2f}"
                      f"{rss[mode] / 1024:13.0f}{latency:>19}", flush=True)  # fmt: skip
    if mismatch:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
