"""Positions of records in their input: the tie rule of temporal joins.

A join without window orders records of equal timestamps by their position in the
input (:mod:`rstreams.semantics.temporal`), which must not depend on how a run dealt
its input over queues or workers. A position is one int:

- a line of an input file: ``ordinal << 56 | byte`` where ``ordinal`` is the source
  topic's place among the topology's source topics (declaration order) and ``byte``
  where the line starts in the file (each line's start is the chunk's start plus the
  lines before it, so a resumed run, which chunks differently, gives the same order);
- a record piped into the test driver: its ``pipe()`` call's number;
- an entry of a Redis stream copied into a source topic (``RedisStream``): ``ordinal
  << 56 | ms << 15 | seq`` of its entry id ``ms-seq``;
- any other record (a topic written by another program): ``ordinal << 56 | queue << 40
  | offset``, its place in the topic as given.

The ingest of a run (and the test driver) puts the position of each record of a topic
that feeds a join without window in a header, :data:`POSITION_HEADER` (8 bytes, big
endian); the join's tag step reads it (:func:`record_positions`). Records derived from
one input record (a flatMap's) share its header, so its position.

    >>> positions_of_lines(1 << 56, 100, [b"ab", b"", b"cde"])
    [72057594037928036, 72057594037928039, 72057594037928040]
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rstreams.planner.topology import Topology
    from rstreams.runtime.queues.base import Headers

__all__ = [
    "POSITION_HEADER",
    "entry_position",
    "line_headers",
    "position_bases",
    "position_header",
    "positions_of_lines",
    "record_positions",
    "source_order",
    "topic_base",
]

#: The header holding a record's position (see the module docstring).
POSITION_HEADER = "rstreams-pos"
_BITS = 56
_QUEUE_BITS = 40


def position_bases(topology: Topology) -> dict[str, int]:
    """The source topics whose records need positions, each with its base (see
    :func:`topic_base`): all of them when the topology has a join without window (one
    rule for every topic keeps ties across topics in declaration order), else none."""
    from rstreams.dsl import nodes as n

    nodes = topology.pipeline.nodes if topology.pipeline is not None else ()
    if not any(isinstance(x, n.JoinNode) and x.window is None for x in nodes):
        return {}
    order = source_order(topology)
    return {t: topic_base(order, t) for t in topology.source_topics}


def source_order(topology: Topology) -> list[str]:
    """The topology's source topics in declaration order."""
    if topology.pipeline is not None:
        return list(topology.pipeline.sources)
    return topology.source_topics


def topic_base(sources: Sequence[str], topic: str) -> int:
    """``ordinal << 56`` of ``topic`` among ``sources`` (declaration order; 127 for a
    topic that is not a source)."""
    ordinal = list(sources).index(topic) if topic in sources else 127
    return min(ordinal, 127) << _BITS


def entry_position(base: int, entry_id: bytes | str) -> int:
    """The position of a Redis stream entry (``b"<ms>-<seq>"``).

    >>> entry_position(0, b"1700000000000-3") == (1700000000000 << 15) | 3
    True
    """
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return base | min(int(ms), (1 << 41) - 1) << 15 | min(int(seq or 0), (1 << 15) - 1)


def position_header(position: int) -> tuple[str, bytes]:
    """The header of a record at ``position``."""
    return (POSITION_HEADER, position.to_bytes(8, "big"))


def positions_of_lines(base: int, start: int, lines: list[bytes]) -> list[int]:
    """Positions of a chunk of ``lines`` (line ends stripped) read from byte ``start``."""
    if not lines:
        return []
    sizes = accumulate((len(x) + 1 for x in lines[:-1]), initial=start + base)
    return list(sizes)


def line_headers(base: int, start: int, lines: list[bytes], last: Headers = ()) -> list[Headers]:
    """The headers of a chunk's records: each its position; ``last`` (the chunk's
    read mark) added to the last record's."""
    heads: list[Headers] = [
        ((POSITION_HEADER, p.to_bytes(8, "big")),) for p in positions_of_lines(base, start, lines)
    ]
    if heads and last:
        heads[-1] = heads[-1] + tuple(last)
    return heads


def record_positions(
    headers: list[Headers] | None, base: int, queue: int, offsets: list[int]
) -> list[int]:
    """The positions of a batch's rows: from their :data:`POSITION_HEADER`, else from
    their place in the topic (``base`` the topic's, see :func:`topic_base`)."""
    fallback = base | (queue << _QUEUE_BITS)
    if headers is None:
        return [fallback | o for o in offsets]
    out: list[int] = []
    for h, o in zip(headers, offsets):
        for name, value in h:
            if name == POSITION_HEADER:
                out.append(int.from_bytes(value, "big"))
                break
        else:
            out.append(fallback | o)
    return out
