"""Nexmark queries (examples/nexmark) on the Redis broker: ``rstreams run --broker
redis://... --workers 2`` on a real redis-server gives the plain-Python baseline's table
(bench/nexmark/baseline.py), byte for byte, as tests/integration/test_nexmark.py checks
on the file log and in one process. Every query of ``baseline.QUERIES``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.nexmark import QUERIES, expected_lines, run_cli, write_events


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_events(tmp_path_factory.mktemp("nexmark") / "events.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("query", QUERIES)
def test_each_query_over_redis_equals_the_plain_python_baseline(
    tmp_path: Path, events: Path, redis_url: str, query: str
) -> None:
    got = run_cli(query, events, tmp_path, "--broker", redis_url, "--workers", "2")
    assert got == expected_lines(query, events, tmp_path)
