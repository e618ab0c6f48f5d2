"""A SparkSession shared by every Spark test (local[2], 4 shuffle partitions, no UI),
created by rstreams' own session code, with a PATH that lies.

Every Spark test runs with a ``python3`` (and ``python``) first on PATH that fails, and
without ``PYSPARK_PYTHON``: PySpark falls back on PATH's ``python3`` for its workers, so
a session that did not pin the interpreter would fail here, as it fails on a machine
whose ``python3`` lacks rstreams.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.extras import importable, skipped_module

#: Why the tests here can not run on this machine, if they can not: they are skipped.
MISSING = (
    "the Spark backend needs pip install 'rstreams[spark]'"
    if not importable("pyspark")
    else "the Spark backend needs Java 17+"
    if shutil.which("java") is None
    else None
)


def pytest_pycollect_makemodule(
    module_path: Path, parent: pytest.Collector
) -> pytest.Module | None:
    return skipped_module(module_path, parent, MISSING) if MISSING else None


STUB = """#!/bin/sh
echo "stub $0: this is not the interpreter rstreams should run" >&2
exit 97
"""


def make_lying_path(directory: Path) -> str:
    """A PATH whose first entry holds failing ``python3`` and ``python`` stubs."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("python3", "python"):
        stub = directory / name
        stub.write_text(STUB)
        stub.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(scope="session", autouse=True)
def one_spark_worker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Under pytest-xdist with ``--dist loadgroup`` (``./dev test``), every Spark test
    runs in one worker (tests/conftest.py groups them): each worker that runs one notes
    its id in the run's shared temp directory, and the last of them to finish finds
    its own id only."""
    worker = getattr(request.config, "workerinput", {}).get("workerid")
    if worker is None or not request.config.getvalue("loadgroup"):
        yield
        return
    # (basetemp is <the run's directory>/popen-gwN under xdist)
    record = tmp_path_factory.getbasetemp().parent / "spark-workers"
    with record.open("a") as f:
        f.write(f"{worker}\n")
    yield
    workers = sorted(set(record.read_text().split()))
    assert workers == [worker], f"Spark tests ran in more than one xdist worker: {workers}"


@pytest.fixture(scope="session", autouse=True)
def lying_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Put failing python3/python stubs first on PATH (and drop PYSPARK_PYTHON) for the
    whole Spark test session; yields that PATH for subprocesses."""
    path = make_lying_path(tmp_path_factory.mktemp("lying-path"))
    saved = {k: os.environ.get(k) for k in ("PATH", "PYSPARK_PYTHON")}
    os.environ["PATH"] = path
    os.environ.pop("PYSPARK_PYTHON", None)
    yield path
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def spark(lying_path: str) -> Iterator[Any]:
    from rstreams.runtime.spark.session import get_session, stop_session

    session, created = get_session(
        "local[2]",
        app_name="rstreams-tests",
        conf={"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"},
    )
    assert created
    yield session
    stop_session(session)
