"""The runtime's correctness tests of the file log, on a real redis-server: workers
SIGKILLed >= 20 times in one run, a rebalance storm, the watermark conformance of the
windows and joins (the driver's tables), and two hosts of one job, one killed whole.

The tests themselves are in tests/integration (loaded here by path, as
test_broker_contract_redis.py loads the contract): only the broker differs.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time
from pathlib import Path
from types import ModuleType

import pytest
import redis
from test_run_redis import big_corpus, expected_counts, read_table, run_cmd

from rstreams.runtime.rebalance.redis_membership import RedisGroupMembership

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_on_redis", INTEGRATION / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_eos = _load("test_exactly_once")
_conformance = _load("test_conformance_embedded")


@pytest.mark.slow
def test_random_kills_keep_counts_and_output_exact(tmp_path, monkeypatch, redis_url) -> None:
    _eos.random_kills_keep_counts_and_output_exact(tmp_path, monkeypatch, broker=redis_url)


@pytest.mark.slow
def test_rebalance_storm_with_joins_and_clean_leaves(tmp_path, redis_url) -> None:
    _eos.rebalance_storm_with_joins_and_clean_leaves(tmp_path, broker=redis_url)
