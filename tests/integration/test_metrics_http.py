"""`rstreams run --metrics-port`: scraped over real HTTP while a 2-worker run goes on."""

from __future__ import annotations

import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rstreams.loader import load_topology
from rstreams.runtime.engine.coordination.stats import coordination_dir, read_stats
from tests.helpers.metrics import (
    WORDCOUNT,
    get,
    scrape,
    start_run,
    stop_run,
    total,
    wait_for,
    write_corpus,
)

pytest.importorskip("prometheus_client", reason="--metrics-port needs pip install 'rstreams[ops]'")

pytestmark = pytest.mark.slow


def test_metrics_and_health_over_http_during_a_run(tmp_path: Path) -> None:
    data = tmp_path / "input.txt"
    proc, log, base = start_run(tmp_path, 6)
    try:
        topology = load_topology(str(WORDCOUNT))
        first_steps = [f.name for f in topology.subtopologies[0].factories]
        source = first_steps[0]

        def processing() -> dict[str, list[Any]] | None:
            m = scrape(f"{base}/metrics")
            return m if total(m, "rstreams_step_records_in_total", step=source) > 0 else None

        before = wait_for("records counted by the source step", processing)
        write_corpus(data, 2, mode="a")  # --follow: more input while it runs

        # The count behind the shuffle counts too (its worker publishes on its own
        # schedule: wait for it as for the rest).
        count_step = topology.subtopologies[1].factories[1].name

        def grown() -> dict[str, list[Any]] | None:
            m = scrape(f"{base}/metrics")
            ok = all(
                total(m, f"rstreams_step_records_{d}_total", step=step)
                > total(before, f"rstreams_step_records_{d}_total", step=step)
                for step in first_steps
                for d in ("in", "out")
            )
            counted = total(m, "rstreams_step_records_in_total", step=count_step) > 0
            return m if ok and counted else None

        after = wait_for("every step of the first sub-topology and the count to count", grown)
        # Lag per input queue, by topic and queue: the source's and the shuffle's.
        lag_topics = {s.labels["topic"] for s in after["rstreams_queue_lag"]}
        assert lag_topics == {t for sub in topology.subtopologies for t in sub.source_topics}
        assert all(s.labels["queue"].isdigit() for s in after["rstreams_queue_lag"])
        workers = {s.labels["worker"] for s in after["rstreams_queue_lag"]}
        assert len(workers) == 2
        assert total(after, "rstreams_commit_duration_seconds_count") > 0
        inf = [
            s for s in after["rstreams_commit_duration_seconds_bucket"] if s.labels["le"] == "+Inf"
        ]
        assert sum(s.value for s in inf) == total(after, "rstreams_commit_duration_seconds_count")
        assert total(after, "rstreams_workers") == 2
        assert total(after, "rstreams_input_records_total") > 0
        assert total(after, "rstreams_running") == 1
        assert get(f"{base}/healthz") == (200, "ok\n")
    finally:
        code = stop_run(proc)
    # --follow ends on SIGTERM like on Ctrl-C: the workers commit, the run reports.
    assert code == 0, log.read_text()[-3000:]
    # The server stopped with the run.
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/healthz", timeout=2)
    assert "done:" in log.read_text()
    assert not [p for p in (tmp_path / "data").rglob("worker-*.json")]
    assert os.path.exists(tmp_path / "data" / "wordcount" / "coordination" / "wordcount" / "stats")


def test_a_killed_worker_is_restarted_and_counted(tmp_path: Path) -> None:
    proc, log, base = start_run(tmp_path, 1)
    try:
        stats = read_stats(coordination_dir(tmp_path / "data", "wordcount"))
        assert stats.supervisor is not None
        victim = next(w for w in stats.supervisor["workers"] if w["slot"] == 1)
        os.kill(victim["pid"], signal.SIGKILL)

        def restarted() -> dict[str, list[Any]] | None:
            m = scrape(f"{base}/metrics")
            return m if total(m, "rstreams_worker_restarts_total", slot="1") == 1 else None

        m = wait_for("the restart of slot 1 in the metrics", restarted)
        assert total(m, "rstreams_worker_restarts_total", slot="0") == 0
        # Healthy again once the replacement runs (a new member id, new series).
        wait_for("a healthy run again", lambda: get(f"{base}/healthz") == (200, "ok\n"))

        def workers() -> set[str]:
            processed = scrape(f"{base}/metrics").get("rstreams_processed_records_total", [])
            return {s.labels["worker"] for s in processed}

        # The killed worker's series are gone; its replacement publishes its own.
        wait_for("the replacement's statistics", lambda: workers() == {"w0-1", "w1-3"})
    finally:
        code = stop_run(proc)
    assert code == 0, log.read_text()[-3000:]
