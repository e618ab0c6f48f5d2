"""What the Redis server answers mid-run becomes one line naming the cause and what to do,
never a traceback: out of memory, a damaged number in the job's hashes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
CORPUS = ROOT / "examples" / "data" / "corpus.txt"


def _run(url: str, data: Path, corpus: Path = CORPUS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), "--input", str(corpus),
         "--broker", url, "--workers", "1", "--data-dir", str(data), "-q"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_redis_out_of_memory_is_one_line(tmp_path: Path, own_redis: Any) -> None:
    r = redis.Redis.from_url(own_redis.url)
    r.config_set("maxmemory", "3mb")
    r.config_set("maxmemory-policy", "noeviction")
    corpus = tmp_path / "big.txt"
    corpus.write_text(CORPUS.read_text(encoding="utf-8") * 8, encoding="utf-8")
    p = _run(own_redis.url, tmp_path / "d", corpus)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "is out of memory" in p.stderr and "raise maxmemory" in p.stderr, p.stderr
    # Given the memory, the same command goes on from the last commit, exact.
    r.config_set("maxmemory", "0")
    again = _run(own_redis.url, tmp_path / "d", corpus)
    assert again.returncode == 0, again.stderr


@pytest.mark.slow
@pytest.mark.parametrize("hash_", ["ends", "offsets:wordcount", "starts"])
def test_a_damaged_number_in_the_job_s_hashes_is_one_line(
    tmp_path: Path, redis_url: str, hash_: str
) -> None:
    first = _run(redis_url, tmp_path / "d")
    assert first.returncode == 0, first.stderr
    r = redis.Redis.from_url(redis_url)
    r.hset(f"rs:{{wordcount}}:{hash_}", "sentences:1", "abc")
    p = _run(redis_url, tmp_path / "d")
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert f"the hash rs:{{wordcount}}:{hash_} holds 'abc' in field 'sentences:1'" in p.stderr, (
        p.stderr
    )
    assert "--fresh" in p.stderr
