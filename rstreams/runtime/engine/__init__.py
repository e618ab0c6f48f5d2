"""The embedded engine: processors, StreamContext, tasks, commit."""

from rstreams.runtime.engine import processors as processors
from rstreams.runtime.engine.context import EngineConfig, StreamContext
from rstreams.runtime.engine.local import LocalEngine
from rstreams.runtime.engine.record import Record
from rstreams.runtime.engine.task import Task

__all__ = ["EngineConfig", "LocalEngine", "Record", "StreamContext", "Task"]
