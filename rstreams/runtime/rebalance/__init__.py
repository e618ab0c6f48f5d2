"""Consumer-group allocation: which member of a group processes which queue.

Pure logic over queues and member ids (RocketMQ client semantics): every member computes
the whole allocation from the same sorted view, so members agree without talking.
See docs/groups.md for how each strategy splits queues and how to choose one.
"""

from rstreams.runtime.rebalance.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
    AllocateStrategy,
    ConsistentHashRing,
    MessageQueue,
    allocate_by_topic,
    get_strategy,
    java_string_key,
    machine_room_of,
    md5_hash,
    room_by_prefix,
)

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "AllocateMachineRoomNearby",
    "AllocateStrategy",
    "ConsistentHashRing",
    "MessageQueue",
    "allocate_by_topic",
    "get_strategy",
    "java_string_key",
    "machine_room_of",
    "md5_hash",
    "room_by_prefix",
]
