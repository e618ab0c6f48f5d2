"""The fluent DSL: builds the logical graph and nothing else (no runtime code)."""

from rstreams.dsl.external import RedisStream
from rstreams.dsl.stream import (
    GroupedStream,
    JoinedStream,
    RStream,
    RTable,
    StreamBuilder,
    StreamTable,
    WindowStream,
)
from rstreams.dsl.windows import (
    HoppingWindow,
    JoinWindow,
    SessionWindow,
    SlidingWindow,
    TumblingWindow,
    Window,
    Windowed,
)

__all__ = [
    "GroupedStream",
    "HoppingWindow",
    "JoinWindow",
    "JoinedStream",
    "RStream",
    "RTable",
    "RedisStream",
    "SessionWindow",
    "SlidingWindow",
    "StreamBuilder",
    "StreamTable",
    "TumblingWindow",
    "Window",
    "WindowStream",
    "Windowed",
]
