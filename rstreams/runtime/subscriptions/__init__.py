"""Pulsar subscription semantics over rstreams queues: exclusive, shared, failover and
key_shared subscriptions, Key_Shared selectors and the sticky-key hash.

Pure logic over queues and consumer names, plus an in-process consumer API
(:class:`Subscription`) that reads any :class:`~rstreams.runtime.queues.Broker` and
keeps its cursor as the broker's committed offsets. See docs/groups.md.
"""

from rstreams.runtime.subscriptions.batching import Batch, KeyBasedBatcher, KeyBasedBatchProducer
from rstreams.runtime.subscriptions.errors import (
    ConsumerAssignError,
    ConsumerBusyError,
    ConsumerClosedError,
)
from rstreams.runtime.subscriptions.failover import (
    failover_active_consumer,
    failover_active_index,
    failover_order,
    failover_takeover_order,
)
from rstreams.runtime.subscriptions.hashing import (
    DEFAULT_RANGE_SIZE,
    NONE_KEY,
    range_slot,
    sticky_key_hash,
)
from rstreams.runtime.subscriptions.selectors import (
    AutoSplitHashRangeSelector,
    ConsistentHashingSelector,
    StickyHashRangeSelector,
    StickyKeySelector,
)
from rstreams.runtime.subscriptions.subscription import (
    Consumer,
    Message,
    Subscription,
    SubscriptionType,
)

__all__ = [
    "DEFAULT_RANGE_SIZE",
    "NONE_KEY",
    "AutoSplitHashRangeSelector",
    "Batch",
    "ConsistentHashingSelector",
    "Consumer",
    "ConsumerAssignError",
    "ConsumerBusyError",
    "ConsumerClosedError",
    "KeyBasedBatchProducer",
    "KeyBasedBatcher",
    "Message",
    "StickyHashRangeSelector",
    "StickyKeySelector",
    "Subscription",
    "SubscriptionType",
    "failover_active_consumer",
    "failover_active_index",
    "failover_order",
    "failover_takeover_order",
    "range_slot",
    "sticky_key_hash",
]
