"""allocate_by_topic: each topic (a sub-topology's tasks, for the workers) split on its
own, as RocketMQ's RebalanceImpl allocates per subscribed topic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.runtime.engine.coordination.worker import task_queue
from rstreams.runtime.engine.tasks.taskid import TaskId
from rstreams.runtime.rebalance import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateConsistentHash,
    AllocateStrategy,
    MessageQueue,
    allocate_by_topic,
)

FAST = settings(max_examples=60, deadline=None)
STRATEGIES = [AllocateAveragely(), AllocateAveragelyByCircle(), AllocateConsistentHash()]
member_sets = st.sets(st.text("abc123-", min_size=1, max_size=4), min_size=1, max_size=6)
topic_sizes = st.lists(st.integers(1, 12), min_size=1, max_size=4)


def tasks(*sizes: int, job: str = "wc") -> list[MessageQueue]:
    """The queues standing for the tasks of sub-topologies 0, 1, ... of ``sizes`` tasks."""
    return [task_queue(job, TaskId(s, q)) for s, n in enumerate(sizes) for q in range(n)]


def shares(strategy: AllocateStrategy, queues, members) -> dict[str, list[MessageQueue]]:
    ms = sorted(members)
    return {m: allocate_by_topic(strategy, "g", m, queues, ms) for m in ms}


def per_topic(share: list[MessageQueue]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for q in share:
        out.setdefault(q.topic, []).append(q.queue_id)
    return out


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle()], ids=repr)
def test_two_workers_get_half_of_each_subtopology(strategy: AllocateStrategy) -> None:
    got = {m: per_topic(s) for m, s in shares(strategy, tasks(8, 8), ["w1", "w2"]).items()}
    assert {m: {t: len(ids) for t, ids in g.items()} for m, g in got.items()} == {
        "w1": {"wc-0": 4, "wc-1": 4},
        "w2": {"wc-0": 4, "wc-1": 4},
    }
    # The whole list as one topic-sorted list gave one worker a whole sub-topology.
    whole = {m: per_topic(strategy.allocate("g", m, tasks(8, 8), ["w1", "w2"])) for m in got}
    if isinstance(strategy, AllocateAveragely):
        assert [sorted(g) for g in whole.values()] == [["wc-0"], ["wc-1"]]


def test_averagely_vectors_per_topic() -> None:
    # RocketMQ's AVG on 8 queues and 3 consumers, for each topic alike: 3, 3, 2.
    got = {m: per_topic(s) for m, s in shares(AllocateAveragely(), tasks(8, 8), "abc").items()}
    for topic in ("wc-0", "wc-1"):
        assert [got[m][topic] for m in "abc"] == [[0, 1, 2], [3, 4, 5], [6, 7]]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
@FAST
@given(sizes=topic_sizes, members=member_sets)
def test_each_topic_as_the_strategy_splits_it_alone(
    strategy: AllocateStrategy, sizes: list[int], members: set[str]
) -> None:
    queues = tasks(*sizes)
    for m, share in shares(strategy, queues, members).items():
        for s in range(len(sizes)):
            alone = [q for q in queues if q.topic == f"wc-{s}"]
            expected = strategy.allocate("g", m, alone, sorted(members))
            assert [q for q in share if q.topic == f"wc-{s}"] == expected


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle()], ids=repr)
@FAST
@given(sizes=topic_sizes, members=member_sets)
def test_every_topic_spread_and_every_task_once(
    strategy: AllocateStrategy, sizes: list[int], members: set[str]
) -> None:
    queues = tasks(*sizes)
    got = shares(strategy, queues, members)
    assert sorted(q for share in got.values() for q in share) == sorted(queues)
    for s, n in enumerate(sizes):
        counts = [len(per_topic(share).get(f"wc-{s}", [])) for share in got.values()]
        assert max(counts) - min(counts) <= 1  # balanced within one, topic by topic
        assert min(counts) == n // len(members)


@FAST
@given(sizes=topic_sizes, members=member_sets, newcomer=st.text("xyz9", min_size=1, max_size=3))
def test_consistent_hash_stays_stable_across_rebalances(
    sizes: list[int], members: set[str], newcomer: str
) -> None:
    s, queues = AllocateConsistentHash(), tasks(*sizes)

    def owners(ms: set[str]) -> dict[MessageQueue, str]:
        return {q: m for m, share in shares(s, queues, ms).items() for q in share}

    before = owners(members)
    assert sorted(before) == sorted(queues)
    if newcomer not in members:  # a joining worker only takes tasks
        after = owners(members | {newcomer})
        assert all(after[q] in (before[q], newcomer) for q in queues)
    if len(members) > 1:  # only a leaving worker's tasks move
        leaver = sorted(members)[0]
        after = owners(members - {leaver})
        assert all(after[q] == before[q] for q in queues if before[q] != leaver)
    assert owners(members) == before  # the same view, the same split


def test_by_config_queues_once_and_validation() -> None:
    mine = [MessageQueue("wc-1", "local", 3), MessageQueue("wc-0", "local", 0)]
    got = allocate_by_topic(AllocateByConfig(mine), "g", "a", tasks(2, 4), ["a"])
    assert got == mine  # once, though it answers for each topic
    with pytest.raises(ValueError, match="queue list to allocate is empty"):
        allocate_by_topic(AllocateAveragely(), "g", "a", [], ["a"])
    assert allocate_by_topic(AllocateAveragely(), "g", "z", tasks(2, 2), ["a"]) == []
