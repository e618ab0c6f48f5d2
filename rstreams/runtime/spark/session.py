"""Getting a SparkSession: a user's, the active one, or a new one for a master URL."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from pyspark import SparkConf
from pyspark.sql import SparkSession

from rstreams.errors import ConfigError

log = logging.getLogger("rstreams.spark")

#: Stateful streaming operators keep their state in RocksDB, checkpointed as changelogs.
STATE_STORE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}

DEFAULT_MASTER = "local[*]"


def get_session(
    master: str | None = None,
    spark: SparkSession | None = None,
    *,
    app_name: str = "rstreams",
    conf: dict[str, str] | None = None,
) -> tuple[SparkSession, bool]:
    """(session, created): ``spark`` if given, else the active session (when no
    ``master`` is asked for, e.g. under ``spark-submit``), else a new one on ``master``
    (``local[*]`` unless spark-submit or ``spark.master`` says otherwise)."""
    if spark is not None:
        return spark, False
    if master is None:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active, False
    builder: Any = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif not SparkConf().contains("spark.master"):
        builder = builder.master(DEFAULT_MASTER)
    settings = {
        **STATE_STORE_CONF,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    if not os.environ.get("PYSPARK_PYTHON"):
        # Workers must run this interpreter (it has rstreams, pyarrow and pandas).
        settings["spark.pyspark.python"] = sys.executable
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as e:
        raise ConfigError(
            f"could not start Spark (master {master or DEFAULT_MASTER!r}); the Spark "
            f"backend needs Java 17 or later on PATH or in JAVA_HOME: {_first_line(e)}"
        ) from e
    session.sparkContext.setLogLevel(os.environ.get("RSTREAMS_SPARK_LOG_LEVEL", "ERROR"))
    return session, True


def configure_state_store(spark: SparkSession) -> None:
    """Use the RocksDB state store with changelog checkpointing (streaming)."""
    for key, value in STATE_STORE_CONF.items():
        try:
            spark.conf.set(key, value)
        except Exception as e:  # a static conf set differently by the user's session
            log.warning("can not set %s on this session: %s", key, _first_line(e))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
