"""The fluent DSL: builds the logical graph and nothing else (no runtime code)."""

from rstreams.dsl.stream import GroupedStream, JoinedStream, RStream, StreamBuilder, WindowStream
from rstreams.dsl.windows import (
    HoppingWindow,
    JoinWindow,
    SessionWindow,
    SlidingWindow,
    TumblingWindow,
    Windowed,
)

__all__ = [
    "GroupedStream",
    "HoppingWindow",
    "JoinWindow",
    "JoinedStream",
    "RStream",
    "SessionWindow",
    "SlidingWindow",
    "StreamBuilder",
    "TumblingWindow",
    "WindowStream",
    "Windowed",
]
