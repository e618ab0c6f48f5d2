"""The Apache Spark backend: the same pipelines on PySpark, batch and Structured Streaming.

    >>> from rstreams.runtime.spark import SUPPORTED          # no pyspark needed for this
    >>> from rstreams.dsl.nodes import AggregateNode
    >>> SUPPORTED[AggregateNode].batch
    True

Entry point: :func:`run_spark` (also ``rstreams.run(..., backend="spark")`` and
``rstreams run --backend spark``). PySpark is imported only when a run starts, so
``import rstreams`` works without it (``pip install 'rstreams[spark]'``; Java 17+).
See docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rstreams.errors import ConfigError
from rstreams.runtime.spark.support import SUPPORTED, Support, check_supported

if TYPE_CHECKING:
    from rstreams.runtime.results import RunResult

__all__ = ["SUPPORTED", "Support", "check_supported", "run_spark"]

_NEEDED = ("pyspark", "pyarrow", "pandas", "py4j")


def run_spark(*args: Any, **kwargs: Any) -> RunResult:
    """Run a topology on Spark; see :func:`rstreams.runtime.spark.runner.run_spark`."""
    try:
        from rstreams.runtime.spark.runner import run_spark as _run
    except ImportError as e:
        if (e.name or "").split(".")[0] in _NEEDED:
            raise ConfigError(
                f"the Spark backend needs PySpark, pyarrow and pandas ({e}); "
                "install them with: pip install 'rstreams[spark]'"
            ) from e
        raise
    return _run(*args, **kwargs)


run_spark.__doc__ = (run_spark.__doc__ or "") + (
    "\n\n    Signature: run_spark(topology, inputs, *, outputs=None, master=None, spark=None,"
    "\n    streaming=False, checkpoint=None, on_error='fail', progress=None,"
    "\n    trigger_once=True, collect=True, conf=None) -> RunResult"
)
