"""The Nexmark queries (examples/nexmark), their plain-Python baseline
(bench/nexmark/baseline.py) and a small input, for the tests that compare the two on
each backend (tests/integration/test_nexmark.py, tests/redis/test_nexmark_redis.py,
tests/spark/test_nexmark_spark.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "nexmark"))

import baseline  # noqa: E402
import generate  # noqa: E402

__all__ = [
    "EXAMPLES",
    "QUERIES",
    "baseline",
    "expected_lines",
    "generate",
    "run_cli",
    "write_events",
]

QUERIES = sorted(baseline.QUERIES)
EXAMPLES = ROOT / "examples" / "nexmark"


def write_events(path: Path, count: int = 8_000) -> Path:
    """``count`` events, 20 per second of event time (8,000: 400 s): many 10 s windows,
    and bidders who pause for more than the 10 s session gap, so sessions end and start
    again besides those merged by late bids."""
    generate.write(str(path), count, seed=7, rate=20)
    return path


def expected_lines(query: str, events: Path, tmp: Path) -> list[str]:
    """The baseline's table of ``query`` over ``events``, as lines."""
    expected = tmp / f"expected-{query}.jsonl"
    baseline.main([query, str(events), str(expected)])
    lines = expected.read_text().splitlines()
    assert lines, "the input must give the query something to answer"
    return lines


def run_cli(query: str, events: Path, tmp: Path, *mode: str) -> list[str]:
    """``rstreams run examples/nexmark/QUERY.py`` on ``mode``: its ``--output`` lines."""
    out = tmp / "out.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", str(EXAMPLES / f"{query}.py"),
         "--input", str(events), "--output", str(out), "--data-dir", str(tmp / "d"),
         "-q", *mode],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out.read_text().splitlines()
