"""The Prometheus exposition of a job's statistics, and its HTTP server."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rstreams import StreamBuilder
from rstreams.errors import ConfigError
from rstreams.runtime.engine.coordination.local import LocalEngine
from rstreams.runtime.engine.coordination.stats import StatsPublisher, SupervisorStats, read_stats
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.metrics import JobCollector, MetricsServer, health
from tests.helpers.metrics import get

LINES = ["a b a", "c a", "b"]


def prometheus_client() -> Any:
    """The ``prometheus_client`` module; the test is skipped without the ops extra (the
    tests of what rstreams says without it run either way)."""
    return pytest.importorskip("prometheus_client", reason="needs pip install 'rstreams[ops]'")


def parse_exposition(text: str) -> Any:
    """The metric families of a Prometheus exposition text."""
    prometheus_client()
    from prometheus_client.parser import text_string_to_metric_families

    return text_string_to_metric_families(text)


def publish_job(coord: Path, *, dead_worker: bool = False) -> None:
    """A real word count in this process, published as one worker and a supervisor."""
    b = StreamBuilder("wc")
    (
        b.source("lines")
        .flatMap(lambda line: line.split(), name="split")
        .keyBy(lambda w: w)
        .count(name="counts", queues=2)
        .toRStream()
        .sink("out")
    )
    engine = LocalEngine(b.build(), config=EngineConfig())
    engine.producer.send_many("lines", 0, [(0, None, s.encode(), ()) for s in LINES])
    engine.producer.flush()
    engine.run_until_idle()
    engine.producer.send_many("lines", 0, [(0, None, b"not yet", ())] * 4)
    engine.producer.flush()
    pub = StatsPublisher(coord, "w0-1", capture_errors=False)
    pub.commit_took(0.004)
    pub.commit_took(0.3)
    pub.publish({t.id: t for t in engine.tasks}, engine.broker, processed=3, generation=2)
    sup = SupervisorStats(coord, job="wc", pipeline="wc.py", workers_wanted=2)
    sup.spawned(0)
    sup.spawned(1)
    sup.spawned(1)
    workers: dict[int, int | None] = {0: os.getpid(), 1: None if dead_worker else os.getpid()}
    sup.publish({"records_in": 7, "records_out": 3, "lag": 4}, workers)


def scrape(coord: Path) -> dict[str, Any]:
    prom = prometheus_client()
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(coord))
    text = prom.generate_latest(registry).decode()
    return {f.name: f for f in parse_exposition(text)}


def samples(family: Any, name: str | None = None) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in family.samples
        if name is None or s.name == name
    }


def test_the_exposition_holds_steps_queues_commits_and_the_run(tmp_path: Path) -> None:
    coord = tmp_path / "coordination" / "wc"
    publish_job(coord)
    m = scrape(coord)
    w = (("job", "wc"), ("step", "split"), ("worker", "w0-1"))
    assert samples(m["rstreams_step_records_in"], "rstreams_step_records_in_total")[w] == 3
    assert samples(m["rstreams_step_records_out"], "rstreams_step_records_out_total")[w] == 6
    lag = samples(m["rstreams_queue_lag"])
    key = (("job", "wc"), ("queue", "0"), ("task", "0_0"), ("topic", "lines"), ("worker", "w0-1"))
    assert lag[key] == 4
    assert len(lag) == 3  # the source queue and two shuffle queues
    commits = m["rstreams_commit_duration_seconds"]
    assert m["rstreams_commit_duration_seconds"].type == "histogram"
    count = samples(commits, "rstreams_commit_duration_seconds_count")
    assert count == {(("job", "wc"), ("worker", "w0-1")): 2}
    buckets = {
        s.labels["le"]: s.value
        for s in commits.samples
        if s.name == "rstreams_commit_duration_seconds_bucket"
    }
    assert (buckets["0.005"], buckets["0.25"], buckets["0.5"], buckets["+Inf"]) == (1, 1, 2, 2)
    only = (("job", "wc"),)
    assert samples(m["rstreams_input_records"])[only] == 7
    assert samples(m["rstreams_output_records"])[only] == 3
    assert samples(m["rstreams_workers"])[only] == 2
    assert samples(m["rstreams_running"])[only] == 1
    restarts = samples(m["rstreams_worker_restarts"], "rstreams_worker_restarts_total")
    assert restarts == {(("job", "wc"), ("slot", "0")): 0, (("job", "wc"), ("slot", "1")): 1}
    entries = samples(m["rstreams_store_entries"])
    assert sum(entries.values()) == 3  # a, b, c
    for name in ("late", "skipped", "dead_lettered", "restore"):
        family = m[f"rstreams_{name}_records"]
        assert family.type == "counter"
        assert samples(family, f"rstreams_{name}_records_total") == {
            (("job", "wc"), ("worker", "w0-1")): 0
        }


def test_nothing_published_gives_only_the_running_gauge(tmp_path: Path) -> None:
    m = scrape(tmp_path / "coordination" / "wc")
    assert samples(m["rstreams_running"]) == {(("job", "wc"),): 0}
    assert samples(m["rstreams_step_records_in"]) == {}


def test_health_names_what_is_wrong(tmp_path: Path) -> None:
    coord = tmp_path / "coordination" / "wc"
    publish_job(coord, dead_worker=True)
    assert health(read_stats(coord)) == (False, "1 of 2 workers alive (dead: slot 1)")
    publish_job(coord)
    stats = read_stats(coord)
    assert health(stats) == (True, "ok")
    assert health(stats, now=stats.supervisor["time"] + 60)[0] is False  # type: ignore[index]
    SupervisorStats(coord, job="wc", pipeline="wc.py", workers_wanted=2).publish({}, {}, "done")
    assert health(read_stats(coord)) == (False, "the run is done")


def test_the_server_answers_over_http(tmp_path: Path) -> None:
    prometheus_client()
    coord = tmp_path / "coordination" / "wc"
    with MetricsServer(coord, 0) as server:
        assert server.port > 0
        base = f"http://127.0.0.1:{server.port}"
        assert get(f"{base}/healthz") == (503, "no run of this job is publishing statistics\n")
        publish_job(coord)
        assert get(f"{base}/healthz") == (200, "ok\n")
        status, text = get(server.url)
        assert status == 200
        names = {f.name for f in parse_exposition(text)}
        assert {"rstreams_step_records_in", "rstreams_queue_lag"} <= names
        # A port in use is a usage error that names it.
        with pytest.raises(ConfigError, match=f"--metrics-port {server.port}: can not listen"):
            MetricsServer(coord, server.port)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/healthz", timeout=2)


def test_without_prometheus_client_it_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "from rstreams.runtime.metrics import require_prometheus_client\n"
        "require_prometheus_client()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 1
    assert "ConfigError" in r.stderr and "pip install 'rstreams[ops]'" in r.stderr


ROOT = Path(__file__).resolve().parents[2]


def rstreams_run(*args: str, python: str = "") -> subprocess.CompletedProcess[str]:
    code = f"{python}\nimport sys\nfrom rstreams.cli import main\nsys.exit(main(sys.argv[1:]))"
    argv = ["run", str(ROOT / "examples" / "wordcount.py"), "--input"]
    argv += [str(ROOT / "examples" / "data" / "corpus.txt"), *args]
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120
    )


def test_run_refuses_metrics_without_prometheus_client_with_exit_2(tmp_path: Path) -> None:
    r = rstreams_run(
        "--data-dir", str(tmp_path), "--metrics-port", "0",
        python="import sys; sys.modules['prometheus_client'] = None",
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "pip install 'rstreams[ops]'" in r.stderr
    assert not (tmp_path / "wordcount").exists()  # refused before anything ran


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--in-memory"], "drop --in-memory and --backend spark"),
        (["--metrics-port", "70000"], "--metrics-port must be 0..65535"),
    ],
)
def test_run_refuses_metrics_it_can_not_serve(
    tmp_path: Path, args: list[str], message: str
) -> None:
    r = rstreams_run("--data-dir", str(tmp_path), "--metrics-port", "0", *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr


def test_records_with_a_null_key_are_counted_per_worker(tmp_path: Path) -> None:
    coord = tmp_path / "coordination" / "nk"
    b = StreamBuilder("nk")
    (
        b.source("lines")
        .keyBy(lambda line: line or None)  # an empty line has no key
        .count(name="counts", queues=2)
        .toRStream()
        .sink("out")
    )
    engine = LocalEngine(b.build(), config=EngineConfig())
    lines = [b"a", b"", b"b", b"", b""]
    engine.producer.send_many("lines", 0, [(0, None, line, ()) for line in lines])
    engine.producer.flush()
    engine.run_until_idle()
    pub = StatsPublisher(coord, "w0-1", capture_errors=False)
    pub.publish({t.id: t for t in engine.tasks}, engine.broker, processed=5, generation=1)
    (worker,) = read_stats(coord).workers
    assert worker["null_keys"] == 3
    family = scrape(coord)["rstreams_null_key_records"]
    assert family.type == "counter"
    assert samples(family, "rstreams_null_key_records_total") == {
        (("job", "nk"), ("worker", "w0-1")): 3
    }
