"""Queue mappers: which queue of a topic a serialized key goes to.

Every producer of a topic must use the same mapper, or records of one key would land on
different queues (and meet different state). The default is Murmur3 modulo the queue
count; :class:`HashRingQueueMapper` is Orleans' hash ring of queues, where adding
queues moves only the keys between a new queue and its ring neighbour.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from functools import lru_cache
from itertools import repeat

import mmh3


def queue_for_key(key: bytes, queues: int) -> int:
    """The queue a serialized key goes to: unsigned 32-bit Murmur3 (seed 0) modulo count
    (:class:`ModuloQueueMapper`, the default mapper).

    >>> queue_for_key(b"hello", 8) == queue_for_key(b"hello", 8) < 8
    True
    """
    return mmh3.hash(key, 0, False) % queues


class QueueMapper:
    """Maps a serialized key to a queue index in ``range(queues)``."""

    name = "mapper"

    def queue_for(self, key: bytes, queues: int) -> int:
        raise NotImplementedError

    def queues_for(self, keys: list[bytes], queues: int) -> list[int]:
        """:meth:`queue_for` of each key (override with a faster loop)."""
        return [self.queue_for(k, queues) for k in keys]

    def route(self, keys: Sequence[bytes | None], queues: int, keyless: int) -> int | list[int]:
        """The queue of each record of a batch, by its serialized key: the rule of every
        producer (sinks, shuffles, the test driver, ``rstreams produce``, subscriptions).

        A key goes where this mapper puts it; a record without key (None) goes to queue
        ``keyless``, the producer's round-robin turn (one turn per batch: a batch's
        keyless records stay together). Returns one queue when all records go to it
        (always for a single queue or a single record), else a list, one per record.

        >>> m = ModuloQueueMapper()
        >>> m.route([b"a"], 1, 0), m.route([None], 4, 3), m.route([b"a", None, b"a"], 4, 3)
        (0, 3, [2, 3, 2])
        """
        if queues == 1:
            return 0
        if len(keys) == 1:
            (key,) = keys
            return keyless if key is None else self.queue_for(key, queues)
        present = [k for k in keys if k is not None]
        if len(present) == len(keys):
            return self.queues_for(present, queues)
        if not present:
            return keyless
        spread = iter(self.queues_for(present, queues))
        return [keyless if k is None else next(spread) for k in keys]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ModuloQueueMapper(QueueMapper):
    """``mmh3(key) % queues`` (unsigned 32-bit Murmur3, seed 0): the default.

    >>> ModuloQueueMapper().queue_for(b"hello", 8) == queue_for_key(b"hello", 8)
    True
    """

    name = "modulo"

    def queue_for(self, key: bytes, queues: int) -> int:
        return queue_for_key(key, queues)

    def queues_for(self, keys: list[bytes], queues: int) -> list[int]:
        if queues == 1:
            return [0] * len(keys)
        return [h % queues for h in map(mmh3.hash, keys, repeat(0), repeat(False))]


class HashRingQueueMapper(QueueMapper):
    """A ring of ``virtual_nodes`` points per queue (Orleans' HashRingBasedStreamQueueMapper).

    A key goes to the queue owning the first ring point at or after the key's hash,
    wrapping around. Growing a topic from N to N+1 queues moves about 1/(N+1) of the
    keys (modulo moves almost all of them).

    >>> m = HashRingQueueMapper()
    >>> m.queue_for(b"hello", 8) == m.queue_for(b"hello", 8) < 8
    True
    """

    name = "hash-ring"

    def __init__(self, virtual_nodes: int = 30) -> None:
        if virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be >= 1; got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self._ring = lru_cache(maxsize=64)(self._build)

    def _build(self, queues: int) -> tuple[list[int], list[int]]:
        points = sorted(
            (mmh3.hash(f"queue-{q}-{v}".encode(), 0, False), q)
            for q in range(queues)
            for v in range(self.virtual_nodes)
        )
        return [p for p, _ in points], [q for _, q in points]

    def queue_for(self, key: bytes, queues: int) -> int:
        hashes, owners = self._ring(queues)
        i = bisect.bisect_left(hashes, mmh3.hash(key, 0, False))
        return owners[i if i < len(owners) else 0]

    def queues_for(self, keys: list[bytes], queues: int) -> list[int]:
        hashes, owners = self._ring(queues)
        owners = [*owners, owners[0]]  # past the last point: wrap to the first
        points = map(mmh3.hash, keys, repeat(0), repeat(False))
        return list(map(owners.__getitem__, map(bisect.bisect_left, repeat(hashes), points)))

    def __repr__(self) -> str:
        return f"HashRingQueueMapper(virtual_nodes={self.virtual_nodes})"


MAPPERS: dict[str, type[QueueMapper]] = {
    "modulo": ModuloQueueMapper,
    "hash-ring": HashRingQueueMapper,
}


def get_mapper(spec: str | QueueMapper | None) -> QueueMapper:
    if spec is None:
        return ModuloQueueMapper()
    if isinstance(spec, QueueMapper):
        return spec
    try:
        return MAPPERS[spec]()
    except KeyError:
        raise ValueError(
            f"unknown queue mapper {spec!r}; expected one of {sorted(MAPPERS)}"
        ) from None
