"""bench/plots.py, the one command behind docs/benchmarks.md's table and plot, runs at a
tiny size and writes what the page shows (Spark left out: no JVM here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about 10 durable runs with worker processes: 30 s or more
def test_plots_runs_every_mode_on_both_corpora(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "plots.py"), "--mb", "0.2", "--runs", "1",
         "--no-spark", "--out", str(tmp_path)],
        check=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    report = json.loads((tmp_path / "wordcount.json").read_text())
    assert report["runs"] == 1 and set(report["results"]) == {"repeated", "zipf"}
    modes = ["in-memory", "workers 1", "workers 2", "built-ins, workers 2"]
    for r in report["results"].values():
        assert list(r["ratio"]) == modes  # the tables were checked against Counter's
        assert all(x > 0 for x in r["ratio"].values())
        assert set(r["cpu_seconds"]) == {"Counter", *modes}
        assert set(r["peak_rss_mb"]) == {"workers 2", "built-ins, workers 2"}
        assert all(mb > 20 for mb in r["peak_rss_mb"].values())  # a whole process tree
    assert (tmp_path / "wordcount.png").stat().st_size > 0
