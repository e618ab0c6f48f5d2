"""The broker layer: topics of N queues (partitions). Knows nothing of topologies."""

from rstreams.runtime.queues.base import LogRecord, queue_for_key
from rstreams.runtime.queues.filelog import CorruptLogError, FileBroker
from rstreams.runtime.queues.memory import MemoryBroker

__all__ = ["CorruptLogError", "FileBroker", "LogRecord", "MemoryBroker", "queue_for_key"]
