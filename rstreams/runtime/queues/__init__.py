"""The broker layer: topics of N queues (partitions). Knows nothing of topologies."""

from rstreams.runtime.queues.base import LogRecord
from rstreams.runtime.queues.broker import Broker
from rstreams.runtime.queues.filelog import CorruptLogError, FileBroker
from rstreams.runtime.queues.mapper import (
    HashRingQueueMapper,
    ModuloQueueMapper,
    QueueMapper,
    get_mapper,
    queue_for_key,
)
from rstreams.runtime.queues.memory import MemoryBroker

__all__ = [
    "Broker",
    "CorruptLogError",
    "FileBroker",
    "HashRingQueueMapper",
    "LogRecord",
    "MemoryBroker",
    "ModuloQueueMapper",
    "QueueMapper",
    "get_mapper",
    "queue_for_key",
]
