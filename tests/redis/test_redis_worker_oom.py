"""A worker that Redis refuses for want of memory stops the run in one line naming the
server's maxmemory and policy and what to do, as the supervisor's ingest does (before: a
traceback, five restarts that met it again, and the traceback in the run's message)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

#: Few input lines, many shuffle records: the worker's writes fill Redis, not the ingest.
BLOWUP = """
from rstreams import StreamBuilder

def build():
    b = StreamBuilder("blowup")
    (b.source("lines")
      .flatMap(lambda line: [f"{line}-{i}-" + "x" * 200 for i in range(2000)])
      .keyBy(lambda w: w).count().toRStream().sink("counts"))
    return b
"""


@pytest.mark.slow
def test_a_worker_out_of_redis_memory_stops_the_run_in_one_line(
    tmp_path: Path, own_redis: Any
) -> None:
    r = redis.Redis.from_url(own_redis.url)
    r.config_set("maxmemory", "30mb")
    r.config_set("maxmemory-policy", "noeviction")
    (tmp_path / "blowup.py").write_text(BLOWUP)
    (tmp_path / "in.txt").write_text("".join(f"{i}\n" for i in range(50)))
    out = tmp_path / "out.jsonl"

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rstreams", "run", str(tmp_path / "blowup.py"),
             "--input", str(tmp_path / "in.txt"), "--broker", own_redis.url,
             "--workers", "1", "--data-dir", str(tmp_path / "d"), "--output", str(out), "-q"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    p = run()
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr[-3000:]
    assert "is out of memory (maxmemory 30.00M with policy noeviction is reached): raise " in (
        p.stderr
    )
    assert "giving up after" not in p.stderr  # (not restarted: it would meet it again)
    log = (tmp_path / "d" / "blowup" / "logs" / "worker-0.log").read_text()
    assert '"error": "RedisRunError"' in log, log[-3000:]  # (the worker's, not the ingest's)
    # Given the memory, the same command goes on from the last commit, exact.
    r.config_set("maxmemory", "0")
    again = run()
    assert again.returncode == 0, again.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 50 * 2000 and {row["value"] for row in rows} == {1}
