"""Pulsar's sticky-key hash: Murmur3 x86 32-bit, seed 0, sign bit cleared."""

from __future__ import annotations

import mmh3

#: Pulsar's StickyKeyConsumerSelector.DEFAULT_RANGE_SIZE (2 << 15)
DEFAULT_RANGE_SIZE = 65536
#: the sticky key Pulsar uses for a message without key
NONE_KEY = b"NONE_KEY"


def key_bytes(key: bytes | str) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"a sticky key must be bytes or str; got {type(key).__name__}")


def sticky_key_hash(key: bytes | str) -> int:
    """Murmur3 x86 32-bit of ``key`` (str is encoded UTF-8), seed 0, ``& 0x7FFFFFFF``.

    This is Pulsar's ``Murmur3_32Hash.makeHash``; selectors reduce it to a slot.

    >>> sticky_key_hash("key-1") == sticky_key_hash(b"key-1") < 2**31
    True
    """
    return mmh3.hash(key_bytes(key), 0, False) & 0x7FFFFFFF


def range_slot(key: bytes | str, range_size: int = DEFAULT_RANGE_SIZE) -> int:
    """The slot of ``key`` in ``[1, range_size - 1]``: hash % range_size, with 0 taken as 1
    (Pulsar 4.x keeps 0 for "no hash"); used by the hash-range selectors."""
    slot = sticky_key_hash(key) % range_size
    return slot or 1
