"""Queue mappers: modulo (default) and the Orleans-style hash ring."""

from __future__ import annotations

import collections
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstreams import StreamBuilder
from rstreams.runtime.queues import (
    HashRingQueueMapper,
    ModuloQueueMapper,
    get_mapper,
    queue_for_key,
)
from rstreams.testing import TopologyTestDriver

KEYS = [f"key-{i}".encode() for i in range(5000)]


@given(key=st.binary(max_size=64), queues=st.integers(1, 64))
def test_mappers_are_deterministic_and_in_range(key: bytes, queues: int) -> None:
    for mapper in (ModuloQueueMapper(), HashRingQueueMapper()):
        q = mapper.queue_for(key, queues)
        assert 0 <= q < queues
        assert mapper.queue_for(key, queues) == q


def test_modulo_is_murmur3_mod() -> None:
    assert all(ModuloQueueMapper().queue_for(k, 7) == queue_for_key(k, 7) for k in KEYS[:100])


def test_hash_ring_spreads_keys_and_moves_few_when_a_queue_is_added() -> None:
    ring, mod = HashRingQueueMapper(), ModuloQueueMapper()
    spread = collections.Counter(ring.queue_for(k, 8) for k in KEYS)
    assert len(spread) == 8 and min(spread.values()) > len(KEYS) / 8 / 3
    moved_ring = sum(ring.queue_for(k, 8) != ring.queue_for(k, 9) for k in KEYS)
    moved_mod = sum(mod.queue_for(k, 8) != mod.queue_for(k, 9) for k in KEYS)
    # Ring: only keys taken by the new queue move (~1/9); modulo moves most keys.
    assert moved_ring < len(KEYS) * 0.25 < len(KEYS) * 0.75 < moved_mod
    assert all(
        ring.queue_for(k, 9) == 8 for k in KEYS if ring.queue_for(k, 8) != ring.queue_for(k, 9)
    )


def test_get_mapper() -> None:
    assert isinstance(get_mapper(None), ModuloQueueMapper)
    assert isinstance(get_mapper("hash-ring"), HashRingQueueMapper)
    with pytest.raises(ValueError, match="unknown queue mapper 'nope'"):
        get_mapper("nope")
    with pytest.raises(ValueError, match="virtual_nodes"):
        HashRingQueueMapper(0)


def test_driver_with_hash_ring_counts_the_same(corpus_lines) -> None:
    b = StreamBuilder("wc")
    b.source("s").flatMap(lambda v: re.findall(r"\w+", v.lower())).keyBy(lambda w: w).count(
        name="c"
    ).sink("out")
    lines = corpus_lines[:300]
    with TopologyTestDriver(b.build(), queue_mapper="hash-ring", queues={"s": 3}) as d:
        for line in lines:
            d.pipe("s", line)
        got = d.state("wc-c-store")
    expected = collections.Counter(w for line in lines for w in re.findall(r"\w+", line.lower()))
    assert got == dict(expected)
