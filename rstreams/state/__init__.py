"""Keyed state: a byte store (memory or RocksDB) under three layers, as Kafka Streams
stacks them: metered, caching, change-logging (see :mod:`rstreams.state.metered`)."""

from rstreams.state.cache import CachedStore
from rstreams.state.changelogging import ChangeLoggingStore, ChangelogLog
from rstreams.state.metered import MeteredStore, StoreMetrics, store_stack
from rstreams.state.stores import KeyValueStore, MemoryStore

__all__ = [
    "CachedStore",
    "ChangeLoggingStore",
    "ChangelogLog",
    "KeyValueStore",
    "MemoryStore",
    "MeteredStore",
    "StoreMetrics",
    "store_stack",
]
