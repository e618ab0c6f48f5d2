"""A SparkSession shared by every Spark test (local[2], 4 shuffle partitions, no UI)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip(
    "pyspark", reason="the Spark backend needs pip install rstreams[spark]"
)

if shutil.which("java") is None:  # pragma: no cover - depends on the machine
    pytest.skip("the Spark backend needs Java 17+", allow_module_level=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from rstreams.runtime.spark.session import STATE_STORE_CONF

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("rstreams-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
    )
    for key, value in STATE_STORE_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
