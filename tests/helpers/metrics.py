"""Scraping `rstreams run --metrics-port` over real HTTP: start a ``--follow`` run with
the endpoint on a free port, wait for conditions, read the Prometheus text."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "data" / "corpus.txt"
WORDCOUNT = ROOT / "examples" / "wordcount.py"


def write_corpus(path: Path, mb: float, mode: str = "w") -> None:
    text = CORPUS.read_text(encoding="utf-8")
    with path.open(mode, encoding="utf-8") as f:
        for _ in range(max(1, round(mb * 1_000_000 / len(text)))):
            f.write(text)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def scrape(url: str) -> dict[str, list[Any]]:
    # Imported here: the other helpers (wait_for...) serve tests without the ops extra.
    from prometheus_client.parser import text_string_to_metric_families

    status, text = get(url)
    assert status == 200, text
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def total(metrics: dict[str, list[Any]], name: str, **labels: str) -> float:
    return sum(
        s.value
        for s in metrics.get(name, [])
        if all(s.labels.get(k) == v for k, v in labels.items())
    )


def start_run(tmp_path: Path, mb: float, *extra: str) -> tuple[subprocess.Popen[bytes], Path, str]:
    """``rstreams run --workers 2 --follow --metrics-port 0`` on about ``mb`` MB (and
    ``extra`` arguments): the process, its stderr file and the server's base URL, once
    /healthz says ok."""
    data = tmp_path / "input.txt"
    write_corpus(data, mb)
    log = tmp_path / "stderr.txt"
    cmd = [
        sys.executable, "-m", "rstreams", "run", str(WORDCOUNT), "--input", str(data),
        "--workers", "2", "--follow", "--data-dir", str(tmp_path / "data"),
        "--metrics-port", "0", *extra,
    ]  # fmt: skip
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path)
    try:
        found = wait_for(
            "the metrics address on stderr",
            lambda: re.search(r"http://127\.0\.0\.1:(\d+)/metrics", log.read_text()),
            timeout=30,
        )
        base = f"http://127.0.0.1:{found.group(1)}"
        wait_for("a healthy run", lambda: get(f"{base}/healthz") == (200, "ok\n"))
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, log, base


def stop_run(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=120)
