"""Consumer-group allocation: which member of a group processes which queue.

Pure logic over queues and member ids (RocketMQ client semantics): every member computes
the whole allocation from the same sorted view, so members agree without talking.
"""

from rstreams.runtime.rebalance.allocate import AllocateAveragely, AllocateStrategy, MessageQueue

__all__ = ["AllocateAveragely", "AllocateStrategy", "MessageQueue"]
