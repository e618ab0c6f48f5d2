"""The fluent DSL: builds the logical graph and nothing else (no runtime code)."""

from rstreams.dsl.stream import GroupedStream, JoinedStream, RStream, StreamBuilder, WindowStream

__all__ = ["GroupedStream", "JoinedStream", "RStream", "StreamBuilder", "WindowStream"]
