"""The planner: logical graph -> sub-topologies, internal topics, stores, factories."""

from __future__ import annotations

import re

import pytest

from rstreams import StreamBuilder, Topology, TopologyError, UnsupportedOperation
from rstreams.dsl import nodes as n
from rstreams.planner import ProcessorFactory
from rstreams.planner.topology import DEFAULT_SHUFFLE_QUEUES
from rstreams.runtime.engine.operators.aggregate import AggregateProcessor
from rstreams.runtime.engine.operators.processors import (
    FlatMapProcessor,
    Processor,
    UserSourceProcessor,
)
from rstreams.runtime.engine.operators.registry import PROCESSORS

WORD = re.compile(r"\w+")


def wordcount(
    job: str = "wordcount",
    *,
    source_queues: int | None = None,
    count_queues: int | None = None,
) -> Topology:
    b = StreamBuilder(job)
    (
        b.source("sentences", queues=source_queues)
        .flatMap(lambda line: WORD.findall(line.lower()))
        .keyBy(lambda w: w)
        .count(queues=count_queues)
        .toRStream()
        .sink("word-counts")
    )
    return b.build()


# -- shape ------------------------------------------------------------------------------


def test_word_count_has_two_subtopologies_split_at_the_shuffle() -> None:
    t = wordcount()
    assert [st.id for st in t.subtopologies] == [0, 1]
    first, second = t.subtopologies
    shuffle = "wordcount-sentences-count-3-shuffle"
    assert first.source_topics == ["sentences"]
    assert first.sink_topics == [shuffle]
    assert second.source_topics == [shuffle]
    assert second.sink_topics == ["word-counts"]
    assert [f.name for f in first.factories] == [
        "source-sentences",
        "sentences-flatMap-1",
        "sentences-keyBy-2",
        "sentences-count-3-shuffle-sink",
    ]
    assert [f.kind for f in second.factories] == [
        "shuffle-source",
        "aggregate",
        "toRStream",
        "sink",
    ]
    assert second.stores == ["wordcount-sentences-count-3-store"]
    assert first.stores == []
    assert all(f.subtopology == st.id for st in t.subtopologies for f in st.factories)


def test_internal_topic_and_store_names_derive_from_job_and_step() -> None:
    t = wordcount("wc")
    step = "sentences-count-3"
    assert t.topics[f"wc-{step}-shuffle"].role == "shuffle"
    assert t.topics[f"wc-{step}-changelog"].role == "changelog"
    assert list(t.stores) == [f"wc-{step}-store"]
    store = t.stores[f"wc-{step}-store"]
    assert store.processor == step
    assert store.changelog_topic == f"wc-{step}-changelog"
    assert store.input_topic == f"wc-{step}-shuffle"
    assert t.factories[step].stores == [f"wc-{step}-store"]
    assert t.factories[step].label == "count"


def test_topic_roles_and_flags() -> None:
    t = wordcount()
    roles = {name: spec.role for name, spec in t.topics.items()}
    assert roles == {
        "sentences": "source",
        "wordcount-sentences-count-3-shuffle": "shuffle",
        "wordcount-sentences-count-3-changelog": "changelog",
        "word-counts": "sink",
    }
    assert [name for name, s in t.topics.items() if s.internal] == [
        "wordcount-sentences-count-3-shuffle",
        "wordcount-sentences-count-3-changelog",
    ]
    assert [name for name, s in t.topics.items() if s.compacted] == [
        "wordcount-sentences-count-3-changelog"
    ]
    assert t.source_topics == ["sentences"]
    assert t.sink_topics == ["word-counts"]
    assert t.subtopology_of_topic("sentences") == [t.subtopologies[0]]
    assert t.subtopology_of_topic("wordcount-sentences-count-3-shuffle") == [t.subtopologies[1]]
    assert t.subtopology_of_topic("word-counts") == []
    assert repr(t) == "Topology('wordcount', subtopologies=2, processors=8, stores=1)"


# -- queue counts -----------------------------------------------------------------------


def queue_counts(t: Topology) -> dict[str, int | None]:
    return {name: spec.queues for name, spec in t.topics.items()}


def test_shuffle_queues_default_to_8_when_the_source_count_is_unknown() -> None:
    assert DEFAULT_SHUFFLE_QUEUES == 8
    t = wordcount()
    assert queue_counts(t) == {
        "sentences": None,
        "wordcount-sentences-count-3-shuffle": 8,
        "wordcount-sentences-count-3-changelog": 8,
        "word-counts": None,
    }
    assert t.stores["wordcount-sentences-count-3-store"].queues == 8


def test_shuffle_queues_follow_the_declared_source_count() -> None:
    t = wordcount(source_queues=4)
    assert queue_counts(t)["sentences"] == 4
    assert queue_counts(t)["wordcount-sentences-count-3-shuffle"] == 4
    assert queue_counts(t)["wordcount-sentences-count-3-changelog"] == 4
    assert t.stores["wordcount-sentences-count-3-store"].queues == 4


@pytest.mark.parametrize("source_queues", [None, 4])
def test_shuffle_queues_follow_the_operator_count_when_given(source_queues: int | None) -> None:
    t = wordcount(source_queues=source_queues, count_queues=3)
    assert queue_counts(t)["wordcount-sentences-count-3-shuffle"] == 3
    assert queue_counts(t)["wordcount-sentences-count-3-changelog"] == 3
    assert t.stores["wordcount-sentences-count-3-store"].queues == 3


def test_merged_sources_shuffle_to_the_largest_known_count() -> None:
    b = StreamBuilder("m")
    b.source("a", queues=2).merge(b.source("b", queues=6), b.source("c")).keyBy(len).count(
        name="n"
    ).sink("out")
    t = b.build()
    assert t.topics["m-n-shuffle"].queues == 6


def test_group_by_key_on_a_single_source_needs_no_shuffle() -> None:
    b = StreamBuilder("g")
    b.source("in", queues=4).groupByKey().count().sink("out")
    t = b.build()
    assert not [name for name, s in t.topics.items() if s.role == "shuffle"]
    assert len(t.subtopologies) == 1
    store = t.stores["g-in-count-1-store"]
    assert store.input_topic == "in"
    assert store.queues == 4
    assert t.topics["g-in-count-1-changelog"].queues == 4
    assert [f.kind for f in t.subtopologies[0].factories] == [
        "source",
        "aggregate",
        "toRStream",
        "sink",
    ]


def test_group_by_key_with_unknown_source_count_leaves_it_to_the_runtime() -> None:
    b = StreamBuilder("g")
    b.source("in").groupByKey().sum().sink("out")
    t = b.build()
    assert t.stores["g-in-sum-1-store"].queues is None
    assert t.topics["g-in-sum-1-changelog"].queues is None


def test_group_by_key_can_not_change_the_queue_count_without_a_shuffle() -> None:
    b = StreamBuilder("g")
    b.source("in", queues=4).groupByKey().count(queues=2).sink("out")
    with pytest.raises(TopologyError, match="asks for 2 queues but reads topic 'in' with 4"):
        b.build()


def test_group_by_key_after_a_merge_of_two_topics_shuffles() -> None:
    b = StreamBuilder("g")
    b.source("a").merge(b.source("b")).groupByKey().count(name="c").sink("out")
    t = b.build()
    assert t.topics["g-c-shuffle"].role == "shuffle"
    assert t.stores["g-c-store"].input_topic == "g-c-shuffle"


def test_group_by_key_after_an_aggregation_reuses_its_partitioning() -> None:
    b = StreamBuilder("g")
    counts = b.source("in").keyBy(str.lower).count(name="c")
    counts.toRStream().groupByKey().reduce(max, name="r").sink("out")
    t = b.build()
    assert "g-r-shuffle" not in t.topics
    assert t.stores["g-r-store"].input_topic == "g-c-shuffle"
    assert t.stores["g-r-store"].queues == 8


def test_key_by_after_an_aggregation_shuffles_again() -> None:
    b = StreamBuilder("g")
    b.source("in").keyBy(str.lower).count(name="c").toRStream().keyBy(len).sum(name="s").sink("out")
    t = b.build()
    assert [st.source_topics for st in t.subtopologies] == [
        ["in"],
        ["g-c-shuffle"],
        ["g-s-shuffle"],
    ]


# -- factories and sub-topologies -------------------------------------------------------


def test_processor_factory_build_returns_a_fresh_processor_each_call() -> None:
    t = wordcount()
    factory = t.factories["sentences-flatMap-1"]
    first, second = factory.build(PROCESSORS), factory.build(PROCESSORS)
    assert isinstance(first, FlatMapProcessor) and isinstance(second, FlatMapProcessor)
    assert first is not second
    assert first.name == second.name == "sentences-flatMap-1"
    assert first.children == [] and second.children == []  # unlinked

    agg = t.factories["sentences-count-3"]
    a1, a2 = agg.build(PROCESSORS), agg.build(PROCESSORS)
    assert isinstance(a1, AggregateProcessor) and a1 is not a2
    assert a1.pending is not a2.pending


def test_subtopology_build_links_children() -> None:
    b = StreamBuilder("j")
    src = b.source("in")
    src.flatMap(str.split).sink("words")
    src.map(str.upper).sink("upper")
    sub = b.build().subtopologies[0]

    procs = sub.build(PROCESSORS)
    assert list(procs) == [f.name for f in sub.factories]
    assert all(isinstance(p, Processor) for p in procs.values())
    assert isinstance(procs["source-in"], UserSourceProcessor)
    assert procs["source-in"].children == [procs["in-flatMap-1"], procs["in.1-map-1"]]
    assert procs["in-flatMap-1"].children == [procs["in-sink-2"]]
    assert procs["in-sink-2"].children == []

    again = sub.build(PROCESSORS)
    assert all(again[name] is not procs[name] for name in procs)


def test_factories_know_parents_and_children() -> None:
    t = wordcount()
    f = t.factories
    assert f["sentences-keyBy-2"].parents == ["sentences-flatMap-1"]
    assert f["sentences-keyBy-2"].children == ["sentences-count-3-shuffle-sink"]
    assert f["sentences-count-3-shuffle-source"].parents == []
    assert f["sentences-count-3"].parents == ["sentences-count-3-shuffle-source"]
    assert [x.role for x in f.values()] == [
        "source",
        "processor",
        "processor",
        "sink",
        "source",
        "processor",
        "processor",
        "sink",
    ]


def test_factory_of_unknown_kind_fails_loudly() -> None:
    node = StreamBuilder("j").source("in").map(str.upper).node
    factory = ProcessorFactory("x", "teleport", node)
    with pytest.raises(UnsupportedOperation, match="no processor for step 'x' of kind 'teleport'"):
        factory.build(PROCESSORS)


def test_node_type_without_translation_rule_fails_loudly() -> None:
    class MysteryNode(n.Node):
        kind = "mystery"

    b = StreamBuilder("j")
    src = b.source("in")
    b.pipeline.add(MysteryNode, (src.node,), None)
    with pytest.raises(
        UnsupportedOperation,
        match=r"no translation rule for MysteryNode \(step 'in-mystery-1'\) on the embedded engine",
    ):
        b.build()


# -- describe ---------------------------------------------------------------------------


def test_describe_lists_subtopologies_processors_edges_topics_and_stores() -> None:
    text = wordcount().describe()
    lines = text.splitlines()
    assert lines[0] == "Topology: wordcount"
    assert text.endswith("\n")
    for expected in [
        "  Sub-topology: 0",
        "    Source: source-sentences (topic: sentences)",
        "      --> sentences-flatMap-1",
        "    Processor: sentences-flatMap-1 [flatMap]",
        "      <-- source-sentences",
        "    Sink: sentences-count-3-shuffle-sink (topic: wordcount-sentences-count-3-shuffle)",
        "  Sub-topology: 1",
        "    Source: sentences-count-3-shuffle-source (topic: wordcount-sentences-count-3-shuffle)",
        "    Processor: sentences-count-3 [count] (stores: [wordcount-sentences-count-3-store])",
        "    Sink: sentences-sink-5 (topic: word-counts)",
        "  Topics:",
        "    sentences                              source     queues: ?",
        "    wordcount-sentences-count-3-shuffle    shuffle    queues: 8",
        "    wordcount-sentences-count-3-changelog  changelog  queues: 8",
        "    word-counts                            sink       queues: ?",
        "  Stores:",
        "    wordcount-sentences-count-3-store  (processor: sentences-count-3, "
        "changelog: wordcount-sentences-count-3-changelog, queues: 8)",
    ]:
        assert expected in lines, expected
    assert lines.index("  Sub-topology: 0") < lines.index("  Sub-topology: 1")
    assert lines.index("  Sub-topology: 1") < lines.index("  Topics:") < lines.index("  Stores:")


def test_describe_without_stores_has_no_stores_section() -> None:
    b = StreamBuilder("clicks")
    b.source("clicks", deserializer="json").filter(lambda c: c["ok"]).sink("good-clicks")
    text = b.build().describe()
    assert "Stores:" not in text
    assert "    Processor: clicks-filter-1 [filter]" in text.splitlines()
    assert "queues: ?" in text


def test_describe_shows_declared_queue_counts() -> None:
    text = wordcount(source_queues=4).describe()
    assert re.search(r"^    sentences +source +queues: 4$", text, re.M)
    assert re.search(r"^    wordcount-sentences-count-3-shuffle +shuffle +queues: 4$", text, re.M)
