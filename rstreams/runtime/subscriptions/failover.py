"""Failover subscriptions: which consumer is active for which queue (Pulsar semantics)."""

from __future__ import annotations

from collections.abc import Sequence


def _java_key(s: str) -> bytes:
    # Java's String.compareTo order (UTF-16 code units).
    return s.encode("utf-16-be", "surrogatepass")


def failover_order(consumers: Sequence[tuple[str, int]]) -> list[int]:
    """Indexes of ``consumers`` sorted by (priority level ascending, name).

    Ties keep the given order (Pulsar's stable sort over consumers in connection order).
    """
    return sorted(
        range(len(consumers)), key=lambda i: (consumers[i][1], _java_key(consumers[i][0]))
    )


def failover_active_index(queue_index: int, consumers: Sequence[tuple[str, int]]) -> int:
    """Like :func:`failover_active_consumer`, as an index into ``consumers``."""
    if not consumers:
        raise ValueError("failover needs at least one consumer to pick an active one")
    if queue_index < 0:
        raise ValueError(f"queue_index must be >= 0; got {queue_index}")
    order = failover_order(consumers)
    top = consumers[order[0]][1]
    n = sum(1 for _, priority in consumers if priority == top)
    return order[queue_index % n]


def failover_active_consumer(queue_index: int, consumers: Sequence[tuple[str, int]]) -> str:
    """The active consumer of queue ``queue_index`` among ``(name, priority_level)`` pairs.

    Consumers are sorted by (priority level ascending, name); the queues are spread over
    the consumers of the highest priority (lowest level) only: queue p gets
    ``sorted[p % n]`` with ``n`` the number of such consumers. The others stand by.

    >>> cs = [("c2", 0), ("c1", 0), ("backup", 1)]
    >>> [failover_active_consumer(p, cs) for p in range(4)]
    ['c1', 'c2', 'c1', 'c2']
    """
    return consumers[failover_active_index(queue_index, consumers)][0]


def failover_takeover_order(queue_index: int, consumers: Sequence[tuple[str, int]]) -> list[str]:
    """Who is active for the queue, then who takes over if that one leaves, and so on.

    >>> failover_takeover_order(1, [("a", 0), ("b", 0), ("c", 1)])
    ['b', 'a', 'c']
    """
    left = list(consumers)
    out = []
    while left:
        i = failover_active_index(queue_index, left)
        out.append(left.pop(i)[0])
    return out
