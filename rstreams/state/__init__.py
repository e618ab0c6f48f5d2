"""Keyed state: byte stores (memory; RocksDB comes next) behind a write-back cache."""

from rstreams.state.cache import CachedStore
from rstreams.state.stores import KeyValueStore, MemoryStore

__all__ = ["CachedStore", "KeyValueStore", "MemoryStore"]
