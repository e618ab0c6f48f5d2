"""The fluent DSL: immutability, branching, step naming and early, helpful errors."""

from __future__ import annotations

import attrs
import pytest

from rstreams import (
    DuplicateStepError,
    GroupedStream,
    InvalidFunctionError,
    JoinedStream,
    MissingKeyError,
    RStream,
    RStreamsError,
    RTable,
    StreamBuilder,
    TopologyError,
    WindowStream,
)
from rstreams.dsl import nodes as n
from rstreams.testing import TopologyTestDriver


def step_names(b: StreamBuilder) -> list[str]:
    return [node.name for node in b.pipeline.nodes]


# -- immutability and branching ---------------------------------------------------------


def test_each_method_returns_a_new_stream_and_leaves_the_old_one_alone() -> None:
    b = StreamBuilder("j")
    src = b.source("in")
    src_node = src.node
    mapped = src.map(str.upper)
    filtered = mapped.filter(bool)

    assert mapped is not src and filtered is not mapped
    assert src.node is src_node and isinstance(src.node, n.SourceNode)
    assert isinstance(mapped.node, n.MapNode) and mapped.node.parents == (src_node,)
    assert isinstance(filtered.node, n.FilterNode) and filtered.node.parents == (mapped.node,)
    grouped = filtered.keyBy(len)
    counted = grouped.count()
    assert isinstance(grouped, GroupedStream) and isinstance(counted, RTable)
    assert counted is not grouped and isinstance(grouped.node, n.KeyByNode)


def test_logical_nodes_are_frozen() -> None:
    b = StreamBuilder("j")
    node = b.source("in").map(str.upper).node
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        node.name = "other"  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        node.fn = str.lower  # type: ignore[misc]


def test_one_stream_feeds_two_chains_and_two_sinks() -> None:
    b = StreamBuilder("branchy")
    words = b.source("in").flatMap(str.split)
    words.map(str.upper).sink("upper")
    words.filter(lambda w: len(w) > 3).sink("long")

    assert [c.name for c in b.pipeline.children_of(words.node)] == [
        "in-map-2",
        "in.1-filter-2",
    ]
    topology = b.build()
    assert topology.sink_topics == ["upper", "long"]
    assert len(topology.subtopologies) == 1

    with TopologyTestDriver(topology) as driver:
        driver.pipe("in", "a quick brown fox")
        assert driver.read_values("upper") == ["A", "QUICK", "BROWN", "FOX"]
        assert driver.read_values("long") == ["quick", "brown"]


def test_a_failed_call_adds_nothing_to_the_pipeline() -> None:
    b = StreamBuilder("j")
    src = b.source("in")
    with pytest.raises(InvalidFunctionError):
        src.map("not a function")  # type: ignore[arg-type]
    src.map(str.upper).sink("out")
    # The failed map() took no branch slot and no name.
    assert step_names(b) == ["source-in", "in-map-1", "in-sink-2"]


# -- step names -------------------------------------------------------------------------


def test_generated_names_follow_chain_kind_depth() -> None:
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .flatMap(str.split)
        .keyBy(lambda w: w)
        .count()
        .toRStream()
        .sink("word-counts")
    )
    assert step_names(b) == [
        "source-sentences",
        "sentences-flatMap-1",
        "sentences-keyBy-2",
        "sentences-count-3",
        "sentences-toRStream-4",
        "sentences-sink-5",
    ]


def test_branch_suffix_counts_extra_children() -> None:
    b = StreamBuilder("j")
    src = b.source("lines")
    src.map(str.upper).sink("a")  # first child: no suffix
    second = src.map(str.lower)  # second child: .1
    src.filter(bool).sink("c")  # third child: .2
    second.sink("b")
    second.map(str.title).sink("d")  # second child of a branched step: .1.1

    assert step_names(b) == [
        "source-lines",
        "lines-map-1",
        "lines-sink-2",
        "lines.1-map-1",
        "lines.2-filter-1",
        "lines.2-sink-2",
        "lines.1-sink-2",
        "lines.1.1-map-2",
        "lines.1.1-sink-3",
    ]


def test_user_names_override_generated_ones_and_feed_store_and_topic_names() -> None:
    b = StreamBuilder("job")
    b.source("in").map(str.strip, name="clean").keyBy(len).count(name="by-len").sink(
        "out", name="write"
    )
    assert step_names(b) == [
        "source-in",
        "clean",
        "in-keyBy-2",
        "by-len",
        "in-toRStream-4",
        "write",
    ]
    t = b.build()
    assert "job-by-len-store" in t.stores
    assert {"job-by-len-shuffle", "job-by-len-changelog"} <= set(t.topics)


def test_names_are_stable_when_another_branch_changes() -> None:
    def build(extra_steps: int) -> list[str]:
        b = StreamBuilder("j")
        src = b.source("in")
        src.keyBy(len).count().sink("counts")
        other = src.map(str.upper)
        for _ in range(extra_steps):
            other = other.map(str.lower)
        other.sink("other")
        return [name for name in step_names(b) if not name.startswith("in.1")]

    assert (
        build(0)
        == build(3)
        == [
            "source-in",
            "in-keyBy-1",
            "in-count-2",
            "in-toRStream-3",
            "in-sink-4",
        ]
    )


def test_same_pipeline_twice_gives_same_names() -> None:
    def names() -> list[str]:
        b = StreamBuilder("j")
        b.source("a").map(str.upper).keyBy(len).sum(len).sink("out")
        return step_names(b) + sorted(b.build().topics)

    assert names() == names()


def test_duplicate_user_names_raise_naming_both_steps() -> None:
    b = StreamBuilder("j")
    src = b.source("in")
    src.map(str.upper, name="clean")
    with pytest.raises(
        DuplicateStepError, match=r"'clean' \(filter\) already exists as a map step"
    ):
        src.filter(bool, name="clean")


def test_duplicate_generated_name_suggests_name_override() -> None:
    b = StreamBuilder("j")
    src = b.source("a")
    src.map(str.upper).sink("x")
    src.filter(bool).sink("y")  # chain "a.1" -> "a.1-filter-1"
    other = b.source("a.1")  # a topic whose chain is also "a.1"
    with pytest.raises(DuplicateStepError, match=r"'a\.1-filter-1'.*name=") as info:
        other.filter(bool)
    assert isinstance(info.value, TopologyError) and isinstance(info.value, ValueError)


def test_user_name_colliding_with_a_generated_one() -> None:
    b = StreamBuilder("j")
    src = b.source("in")
    named = src.map(str.upper, name="in-filter-2")
    # A user-named step keeps its chain and depth: its child is generated as in-filter-2.
    with pytest.raises(DuplicateStepError, match="two steps with the same name"):
        named.filter(bool)


@pytest.mark.parametrize("bad", ["", "has space", "-leading-dash", "slash/y", 7])
def test_bad_step_names_are_rejected(bad: object) -> None:
    b = StreamBuilder("j")
    with pytest.raises(TopologyError, match="a step name must be"):
        b.source("in").map(str.upper, name=bad)  # type: ignore[arg-type]


# -- invalid functions ------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.map(42),
        lambda s: s.flatMap("split"),
        lambda s: s.filter(None),
        lambda s: s.peek([]),
        lambda s: s.foreach(1.5),
        lambda s: s.selectTimestamp("ts"),
        lambda s: s.keyBy({}),
    ],
    ids=["map", "flatMap", "filter", "peek", "foreach", "selectTimestamp", "keyBy"],
)
def test_non_callables_raise_invalid_function_error(call) -> None:
    s = StreamBuilder("j").source("in")
    with pytest.raises(InvalidFunctionError, match=r"\w+\(\) expects a function for 'fn'; got "):
        call(s)


def test_invalid_function_message_shows_what_was_given() -> None:
    s = StreamBuilder("j").source("in")
    with pytest.raises(
        InvalidFunctionError, match=r"^map\(\) expects a function for 'fn'; got int 42"
    ):
        s.map(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda g: g.sum("len"), r"sum\(\) expects a function for 'fn'; got str 'len'"),
        (lambda g: g.min(3), r"min\(\) expects a function"),
        (lambda g: g.max(3), r"max\(\) expects a function"),
        (lambda g: g.reduce(None), r"reduce\(\) expects a function for 'fn'"),
        (lambda g: g.aggregate(list, "add"), r"aggregate\(\) expects a function for 'adder'"),
        (lambda g: g.aggregate([], max), r"aggregate\(\) expects a function for 'initializer'"),
    ],
    ids=["sum", "min", "max", "reduce", "aggregate-adder", "aggregate-initializer"],
)
def test_aggregations_check_their_functions(call, message: str) -> None:
    g = StreamBuilder("j").source("in").keyBy(len)
    with pytest.raises(InvalidFunctionError, match=message) as info:
        call(g)
    assert isinstance(info.value, TypeError)


# -- keys, names, shapes ----------------------------------------------------------------


@pytest.mark.parametrize("op", ["count", "sum", "min", "max", "reduce", "aggregate", "window"])
def test_aggregating_an_unkeyed_stream_asks_for_key_by(op: str) -> None:
    s = StreamBuilder("j").source("in").map(str.upper)
    with pytest.raises(MissingKeyError, match=rf"{op}\(\) needs a key: call \.keyBy\(fn\)"):
        getattr(s, op)()
    with pytest.raises(AttributeError):  # MissingKeyError is an AttributeError too
        getattr(s, op)


def test_unknown_attribute_is_a_plain_attribute_error() -> None:
    s = StreamBuilder("j").source("in")
    with pytest.raises(AttributeError, match="no attribute 'colect'") as info:
        s.colect  # noqa: B018
    assert not isinstance(info.value, RStreamsError)
    assert not hasattr(s, "colect")


def test_sink_needs_a_topic() -> None:
    s = StreamBuilder("j").source("in")
    with pytest.raises(TopologyError, match="sink\\(\\) needs a topic name; got an empty one"):
        s.sink("")


@pytest.mark.parametrize("topic", ["has space", "-x", "a/b", "ünï"])
def test_bad_topic_names(topic: str) -> None:
    b = StreamBuilder("j")
    with pytest.raises(TopologyError, match=f"a source topic must be .*got {topic!r}"):
        b.source(topic)
    with pytest.raises(TopologyError, match=f"a sink topic must be .*got {topic!r}"):
        b.source("ok").sink(topic)


@pytest.mark.parametrize("job", ["", "my job", ".hidden", None])
def test_bad_job_ids(job: object) -> None:
    with pytest.raises(TopologyError, match="the job id must be"):
        StreamBuilder(job)  # type: ignore[arg-type]


@pytest.mark.parametrize("queues", [0, -1, 2.0, True, "4"])
def test_queue_counts_must_be_positive_ints(queues: object) -> None:
    b = StreamBuilder("j")
    with pytest.raises(TopologyError, match=r"source\(queues=\.\.\.\) must be a positive int"):
        b.source("in", queues=queues)  # type: ignore[arg-type]
    g = b.source("in2").keyBy(len)
    with pytest.raises(TopologyError, match=r"count\(queues=\.\.\.\) must be a positive int"):
        g.count(queues=queues)  # type: ignore[arg-type]


def test_a_topic_can_only_be_read_once() -> None:
    b = StreamBuilder("j")
    b.source("in")
    with pytest.raises(TopologyError, match="already read by source step 'source-in'"):
        b.source("in")


def test_empty_builder_does_not_build() -> None:
    with pytest.raises(TopologyError, match="empty topology"):
        StreamBuilder("nothing").build()


def test_source_with_no_steps_after_it() -> None:
    b = StreamBuilder("j")
    b.source("used").sink("out")
    b.source("unused")
    with pytest.raises(
        TopologyError, match=r"source step 'source-unused' \(topic 'unused'\) has no steps"
    ):
        b.build()


def test_cycle_between_two_sources_is_rejected() -> None:
    b = StreamBuilder("loop")
    b.source("a").sink("b")
    b.source("b").sink("a")
    with pytest.raises(TopologyError, match="cycle"):
        b.build()


def test_self_loop_is_a_cycle() -> None:
    b = StreamBuilder("loop")
    b.source("a").map(str.upper).sink("a")
    with pytest.raises(TopologyError, match="cycle through topic"):
        b.build()


def test_chained_topics_without_a_cycle_build() -> None:
    b = StreamBuilder("chain")
    b.source("a").sink("b", "str")
    b.source("b").map(str.upper).sink("c", "str")
    t = b.build()
    assert len(t.subtopologies) == 2
    with TopologyTestDriver(t) as driver:
        driver.pipe("a", "hi")
        assert driver.read_values("c") == ["HI"]


# -- merge / union ----------------------------------------------------------------------


def test_merge_makes_one_stream_of_several() -> None:
    b = StreamBuilder("m")
    a = b.source("a")
    c = b.source("c")
    merged = a.merge(c)
    assert isinstance(merged.node, n.MergeNode)
    assert merged.node.parents == (a.node, c.node)
    assert merged.node.name == "a-merge-1"
    merged.map(str.upper).sink("out")
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe("a", "x")
        driver.pipe("c", "y")
        driver.pipe("a", "z")
        assert driver.read_values("out") == ["X", "Y", "Z"]


def test_union_is_merge() -> None:
    b = StreamBuilder("u")
    union = b.source("a").union(b.source("b"), b.source("c"))
    assert isinstance(union.node, n.MergeNode) and len(union.node.parents) == 3
    assert RStream.union is RStream.merge


@pytest.mark.parametrize(
    ("make_others", "message"),
    [
        (lambda b, a: (), "needs at least one other stream"),
        (lambda b, a: (a,), "the same stream twice"),
        (lambda b, a: ("b",), "expects RStream arguments; got str"),
        (
            lambda b, a: (StreamBuilder("other").source("x"),),
            "streams of the same StreamBuilder",
        ),
    ],
    ids=["no-others", "same-twice", "not-a-stream", "other-builder"],
)
def test_merge_errors(make_others, message: str) -> None:
    b = StreamBuilder("m")
    a = b.source("a")
    with pytest.raises(TopologyError, match=message):
        a.merge(*make_others(b, a))


# -- not yet supported ------------------------------------------------------------------


def test_window_and_join_misuse_is_caught_at_build_time() -> None:
    from rstreams import JoinWindow, SessionWindow, TumblingWindow

    b = StreamBuilder("j")
    left = b.source("l")
    right = b.source("r")
    with pytest.raises(TopologyError, match="expects a TumblingWindow"):
        left.keyBy(len).window(None)
    with pytest.raises(TopologyError, match="emit"):
        left.keyBy(len).window(TumblingWindow(10), emit="sometimes")
    with pytest.raises(TopologyError, match="close_after_idle only applies"):
        left.keyBy(len).window(TumblingWindow(10), close_after_idle=5)
    with pytest.raises(TopologyError, match="needs merger="):
        left.keyBy(len).window(SessionWindow(10)).aggregate(list, lambda a, v: a)
    with pytest.raises(TopologyError, match="needs an aggregation first"):
        left.keyBy(len).window(TumblingWindow(10)).toRStream()
    with pytest.raises(TopologyError, match="must be positive"):
        TumblingWindow(0)
    for method in (left.join, left.leftJoin, left.outerJoin):
        with pytest.raises(TopologyError, match=r"needs where\(fn\)"):
            method(right).apply(lambda a, c: a)
        with pytest.raises(TopologyError, match="expects an RStream"):
            method(None)
    with pytest.raises(TopologyError, match="must be a JoinWindow"):
        left.join(right).window(TumblingWindow(5))
    with pytest.raises(TopologyError, match="ttl= is for joins without window"):
        left.join(right).where(len).equalTo(len).window(JoinWindow(1, 1)).apply(max, ttl=5)
    assert isinstance(left.keyBy(len).window(TumblingWindow(10)), WindowStream)
    assert isinstance(left.join(right), JoinedStream)


# -- error classes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trigger", "expected", "builtin"),
    [
        (lambda: StreamBuilder("e").build(), TopologyError, ValueError),
        (lambda: StreamBuilder("e").source("a").map(1), InvalidFunctionError, TypeError),
        (lambda: StreamBuilder("e").source("a").count(), MissingKeyError, AttributeError),
        (lambda: StreamBuilder("e").source("a").count(), MissingKeyError, ValueError),
    ],
    ids=["topology", "function", "missing-key-attr", "missing-key-value"],
)
def test_errors_are_rstreams_errors_and_builtins(trigger, expected, builtin) -> None:
    with pytest.raises(expected) as info:
        trigger()
    assert isinstance(info.value, RStreamsError)
    assert isinstance(info.value, builtin)


def test_repr_names_the_step() -> None:
    b = StreamBuilder("j")
    s = b.source("in").map(str.upper)
    assert repr(s) == "RStream('in-map-1')"
    assert repr(s.keyBy(len)) == "GroupedStream('in-keyBy-2')"
    assert repr(b) == "StreamBuilder('j', steps=3)"
