"""Nexmark queries (examples/nexmark) against the plain-Python baseline
(bench/nexmark/baseline.py) on a small generated input: the same table, byte for byte
(a session merged into another is deleted from the table, not left as ``null``), in one
process and on two worker processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "nexmark"))

import baseline  # noqa: E402
import generate  # noqa: E402

QUERIES = sorted(baseline.QUERIES)
EXAMPLES = ROOT / "examples" / "nexmark"


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nexmark") / "events.jsonl"
    # 40 s of event time: several 10 s windows, sessions that end and start again.
    generate.write(str(path), 8_000, seed=7, rate=200)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["--in-memory"], ["--workers", "2"]], ids=["memory", "workers2"])
@pytest.mark.parametrize("query", QUERIES)
def test_each_query_equals_the_plain_python_baseline(
    tmp_path: Path, events: Path, query: str, mode: list[str]
) -> None:
    expected = tmp_path / "expected.jsonl"
    baseline.main([query, str(events), str(expected)])
    out = tmp_path / "out.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "rstreams", "run", str(EXAMPLES / f"{query}.py"),
         "--input", str(events), "--output", str(out), "--data-dir", str(tmp_path / "d"),
         "-q", *mode],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    want = expected.read_text().splitlines()
    assert want, "the input must give the query something to answer"
    assert out.read_text().splitlines() == want


def test_the_generator_keeps_nexmark_s_shape(tmp_path: Path) -> None:
    events = list(generate.events(5_000, seed=3, rate=1000))
    kinds = [e["event_type"] for e in events]
    assert (kinds.count(0), kinds.count(1), kinds.count(2)) == (100, 300, 4600)  # 1:3:46
    times = [e[("person", "auction", "bid")[e["event_type"]]]["dateTime"] for e in events]
    # Out of order by less than 4 s (Nexmark's watermark is dateTime - 4 s).
    assert max(max(times[: i + 1]) - t for i, t in enumerate(times)) < 4_000
    bids = [e["bid"] for e in events if e["event_type"] == 2]
    assert len({(b["auction"], b["bidder"], b["dateTime"]) for b in bids}) == len(bids)
    assert list(generate.events(50, seed=3)) == events[:50]  # (the same seed, the same file)
