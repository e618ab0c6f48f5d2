"""`rstreams run --metrics-port` on a Redis-backed run: the endpoint serves the job's
metrics (steps, lag per queue of the job's streams, commits, workers), and no label or
value of them holds the password of the broker URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from redisserver import RedisServer, free_port

from rstreams.loader import load_topology
from tests.helpers.metrics import WORDCOUNT, get, scrape, start_run, stop_run, total, wait_for

pytest.importorskip("prometheus_client", reason="--metrics-port needs pip install 'rstreams[ops]'")

pytestmark = pytest.mark.slow

PASSWORD = "metrics-s3cret-pw"


def test_metrics_of_a_redis_run_without_the_password(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", port=free_port(), password=PASSWORD).start()
    try:
        proc, log, base = start_run(tmp_path, 1, "--broker", server.url)
        try:
            topology = load_topology(str(WORDCOUNT))
            count_step = topology.subtopologies[1].factories[1].name

            def counted() -> dict[str, list[Any]] | None:
                m = scrape(f"{base}/metrics")
                busy = total(m, "rstreams_step_records_in_total", step=count_step) > 0
                return m if busy and total(m, "rstreams_commit_duration_seconds_count") else None

            m = wait_for("records counted and committed over Redis", counted)
            lag_topics = {s.labels["topic"] for s in m["rstreams_queue_lag"]}
            assert lag_topics == {t for sub in topology.subtopologies for t in sub.source_topics}
            assert total(m, "rstreams_workers") == 2 and total(m, "rstreams_running") == 1
            assert total(m, "rstreams_input_records_total") > 0
            _, text = get(f"{base}/metrics")
            assert PASSWORD not in text
            for samples in m.values():
                for s in samples:
                    assert not any(PASSWORD in v for v in (*s.labels, *s.labels.values()))
            assert get(f"{base}/healthz") == (200, "ok\n")
        finally:
            code = stop_run(proc)
        assert code == 0, log.read_text()[-3000:]
        assert PASSWORD not in log.read_text()
    finally:
        server.stop()
