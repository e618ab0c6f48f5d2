"""The embedded engine: processors, StreamContext, tasks, commit."""

from rstreams.runtime.engine.coordination.local import LocalEngine
from rstreams.runtime.engine.operators import processors as processors
from rstreams.runtime.engine.operators.context import EngineConfig, StreamContext
from rstreams.runtime.engine.operators.record import Record
from rstreams.runtime.engine.tasks.task import Task

__all__ = ["EngineConfig", "LocalEngine", "Record", "StreamContext", "Task"]
