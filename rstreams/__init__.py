"""rstreams: stream processing for Python.

Write a pipeline once with the fluent DSL, look at its topology, test it with the
in-process driver and run it embedded or on Apache Spark::

    >>> import re
    >>> from rstreams import StreamBuilder
    >>> b = StreamBuilder("wordcount")
    >>> (b.source("sentences")
    ...    .flatMap(lambda line: re.findall(r"\\w+", line.lower()))
    ...    .keyBy(lambda w: w)
    ...    .count()
    ...    .toRStream()
    ...    .sink("word-counts"))
    >>> topology = b.build()
    >>> print(topology.describe().splitlines()[1])
      Sub-topology: 0
"""

from typing import TYPE_CHECKING

from rstreams import functions
from rstreams._version import __version__ as __version__
from rstreams.dsl import (
    GroupedStream,
    HoppingWindow,
    JoinedStream,
    JoinWindow,
    RedisStream,
    RStream,
    RTable,
    SessionWindow,
    SlidingWindow,
    StreamBuilder,
    StreamTable,
    TumblingWindow,
    Window,
    Windowed,
    WindowStream,
)
from rstreams.errors import (
    ConfigError,
    DuplicateStepError,
    InvalidFunctionError,
    MissingKeyError,
    PipelineFileError,
    ProcessingError,
    RStreamsError,
    SerdeError,
    TopologyError,
    UnsupportedOperation,
)
from rstreams.planner.topology import Topology
from rstreams.serde import Serde, get_serde

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ loads them on first use
    from rstreams.runner import RunResult as RunResult
    from rstreams.runner import run as run

__all__ = [
    "ConfigError",
    "DuplicateStepError",
    "GroupedStream",
    "HoppingWindow",
    "InvalidFunctionError",
    "JoinWindow",
    "JoinedStream",
    "MissingKeyError",
    "PipelineFileError",
    "ProcessingError",
    "RStream",
    "RStreamsError",
    "RTable",
    "RedisStream",
    "RunResult",
    "Serde",
    "SerdeError",
    "SessionWindow",
    "SlidingWindow",
    "StreamBuilder",
    "StreamTable",
    "Topology",
    "TopologyError",
    "TumblingWindow",
    "UnsupportedOperation",
    "Window",
    "WindowStream",
    "Windowed",
    "__version__",
    "functions",
    "get_serde",
    "run",
]


def __getattr__(name: str) -> object:
    # run/RunResult pull in the engine: load it on first use so `import rstreams` stays light.
    if name in ("run", "RunResult"):
        from rstreams import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'rstreams' has no attribute {name!r}")
