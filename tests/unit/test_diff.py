"""Topology.diff: matching steps across versions, and what each change does to state."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from rstreams import HoppingWindow, StreamBuilder, Topology, TumblingWindow
from rstreams.planner.diff import (
    StepFacts,
    TopologyDiff,
    TopologyIdentity,
    diff,
    fingerprint,
    identity,
    match_steps,
)


def wordcount(
    *,
    job: str = "wc",
    upstream: Callable[[Any], Any] | None = None,
    name: str | None = None,
    queues: int | None = None,
    key: Callable[[Any], Any] = lambda w: w,
) -> Topology:
    b = StreamBuilder(job)
    words = b.source("lines").flatMap(str.split)
    if upstream is not None:
        words = upstream(words)
    words.keyBy(key).count(name=name, queues=queues).sink("counts")
    return b.build()


def store(d: TopologyDiff, old: str | None = None, new: str | None = None) -> Any:
    (found,) = [
        s for s in d.stores if (old is None or s.old == old) and (new is None or s.new == new)
    ]
    return found


# -- matching ------------------------------------------------------------------------------


def test_the_same_pipeline_matches_every_step_by_name() -> None:
    a, b = identity(wordcount()), identity(wordcount())
    assert match_steps(a.steps, b.steps) == {s.name: s.name for s in a.steps}
    d = diff(a, b)
    assert d.unchanged and not d.loses_state
    assert {c.status for c in (*d.steps, *d.topics, *d.stores)} == {"kept"}


def test_a_step_inserted_upstream_renames_the_steps_after_it() -> None:
    old = wordcount()
    new = wordcount(upstream=lambda s: s.filter(lambda w: len(w) > 2))
    mapping = match_steps(identity(old).steps, identity(new).steps)
    assert mapping == {
        "source-lines": "source-lines",
        "lines-flatMap-1": "lines-flatMap-1",
        "lines-keyBy-2": "lines-keyBy-3",
        "lines-count-3": "lines-count-4",
        "lines-toRStream-4": "lines-toRStream-5",
        "lines-sink-5": "lines-sink-6",
    }
    d = old.diff(new)
    assert [(c.status, c.old, c.new) for c in d.steps if c.status in ("added", "removed")] == [
        ("added", None, "lines-filter-2")
    ]


def test_a_moved_step_is_matched_by_what_it_does_not_by_its_old_place() -> None:
    # Two keyBy+count branches; the first gets a step inserted before its keyBy. The
    # moved keyBy must pair with the old keyBy of the same function, not the other one.
    def build(insert: bool) -> Topology:
        b = StreamBuilder("two")
        words = b.source("lines").flatMap(str.split)
        first = words.map(str.lower) if insert else words
        first.keyBy(lambda w: w).count().sink("by-word")
        words.keyBy(len).count().sink("by-length")
        return b.build()

    mapping = match_steps(identity(build(False)).steps, identity(build(True)).steps)
    assert mapping["lines-keyBy-2"] == "lines-keyBy-3"
    assert mapping["lines.1-keyBy-2"] == "lines.1-keyBy-2"
    assert mapping["lines-count-3"] == "lines-count-4"
    assert mapping["lines.1-count-3"] == "lines.1-count-3"


def test_rename_matching_prefers_the_step_whose_parents_match() -> None:
    def step(name: str, parents: tuple[str, ...], chain: str, depth: int) -> StepFacts:
        return StepFacts(name, "toRStream", False, parents, chain, depth)

    old = [
        step("a", (), "x", 0),
        step("b", (), "y", 0),
        step("x-t-1", ("a",), "x", 1),
        step("y-t-1", ("b",), "y", 1),
    ]
    new = [
        step("a", (), "x", 0),
        step("b", (), "y", 0),
        step("x-t-2", ("a",), "x", 2),
        step("y-t-3", ("b",), "y", 3),
    ]
    # Without the parent preference, the nearer depth would pair x-t-1 with y-t-3's rival.
    assert match_steps(old, new) == {"a": "a", "b": "b", "x-t-1": "x-t-2", "y-t-1": "y-t-3"}


def test_a_step_that_moved_and_changed_is_matched_through_its_parents() -> None:
    def build(insert: bool, serde: str) -> Topology:
        b = StreamBuilder("wc")
        lines = b.source("lines")
        if insert:
            lines = lines.filter(bool)
        lines.map(str.upper).sink("out", serde)
        return b.build()

    old, new = build(False, "json"), build(True, "str")
    mapping = match_steps(identity(old).steps, identity(new).steps)
    assert mapping["lines-map-1"] == "lines-map-2"  # moved: same code
    assert mapping["lines-sink-2"] == "lines-sink-3"  # moved and changed: after the map
    (sink,) = [c for c in old.diff(new).steps if c.old == "lines-sink-2"]
    assert sink.status == "renamed"
    assert "value_serde: json -> str" in sink.notes


def test_a_moved_step_with_other_code_and_other_parents_is_removed_and_added() -> None:
    old = wordcount(key=lambda w: w)
    new = wordcount(upstream=lambda s: s.map(str.lower), key=lambda w: w.strip())
    d = old.diff(new)
    assert [(c.status, c.old or c.new) for c in d.steps if c.kind == "keyBy"] == [
        ("removed", "lines-keyBy-2"),
        ("added", "lines-keyBy-3"),
    ]
    # The count after it still moved with the same code: its store is lost, not new.
    assert store(d, "wc-lines-count-3-store").effect == "lost"


def test_a_user_named_step_that_changed_its_function_is_changed_not_replaced() -> None:
    d = wordcount(name="count", key=lambda w: w).diff(wordcount(name="count", key=str.upper))
    (keyby,) = [c for c in d.steps if c.old == "lines-keyBy-2"]
    assert (keyby.status, keyby.new) == ("changed", "lines-keyBy-2")
    assert store(d, "wc-count-store").status == "kept"
    assert not d.loses_state


# -- stores ---------------------------------------------------------------------------------


def test_a_renamed_store_is_lost_and_the_hint_pins_the_old_name() -> None:
    d = wordcount().diff(wordcount(upstream=lambda s: s.filter(bool)))
    s = store(d, "wc-lines-count-3-store")
    assert (s.status, s.new, s.effect) == ("renamed", "wc-lines-count-4-store", "lost")
    assert s.hint == 'keep it by naming the step as before: .count(name="lines-count-3")'
    assert d.loses_state
    # The hint works: naming the new step as the old one keeps the store.
    pinned = wordcount(upstream=lambda s: s.filter(bool), name="lines-count-3")
    assert not wordcount().diff(pinned).loses_state
    assert store(wordcount().diff(pinned), "wc-lines-count-3-store").status == "kept"


def test_pinned_names_keep_their_stores_whatever_moves_around_them() -> None:
    d = wordcount(name="count").diff(
        wordcount(name="count", upstream=lambda s: s.map(str.lower).filter(bool))
    )
    assert [(s.status, s.effect) for s in d.stores] == [("kept", "stale")]
    assert not d.loses_state
    assert {c.status for c in d.topics} == {"kept"}


# -- changes that apply to new input only ----------------------------------------------------


def stale(d: TopologyDiff) -> list[tuple[str, str]]:
    """(store or topic, the first note) of what the diff calls stale."""
    return [(c.name, c.notes[-1]) for c in (*d.stores, *d.topics) if c.effect == "stale"]


def test_a_filter_inserted_before_a_kept_store_applies_to_new_input_only() -> None:
    d = wordcount(name="count").diff(
        wordcount(name="count", upstream=lambda s: s.filter(lambda w: len(w) > 3))
    )
    assert not d.loses_state and d.stale and not d.unchanged
    assert [name for name, _ in stale(d)] == ["wc-count-store", "counts"]
    (store_note, _) = [note for _, note in stale(d)]
    assert "lines-filter-2 [filter] added" in store_note
    assert "applies to new input only" in store_note
    assert store(d, "wc-count-store").hint == (
        "to recompute it from all input with this version, start the job over with --fresh"
    )
    text = d.describe()
    assert "STALE  wc-count-store [count]" in text
    assert text.endswith(
        "  New input only: 1 store(s) and 1 topic(s) keep what the earlier version computed; "
        "--fresh recomputes from all input\n"
        "  State: nothing lost (1 store(s) kept), but the change applies to new input only\n"
    )


@pytest.mark.parametrize(
    ("old", "new", "cause"),
    [
        # a step removed before the store
        (lambda s: s.filter(bool), None, "lines-filter-2 [filter] removed"),
        # a function body changed (the steps keep their names)
        (lambda s: s.map(str.lower), lambda s: s.map(str.upper), "lines-map-2 [map] changed"),
        # the same steps in another order
        (
            lambda s: s.map(str.lower).filter(bool),
            lambda s: s.filter(bool).map(str.lower),
            "moved",
        ),
        # a value captured by the function changed
        (
            lambda s: s.filter(lambda w, n=2: len(w) > n),
            lambda s: s.filter(lambda w, n=3: len(w) > n),
            "lines-filter-2 [filter] changed",
        ),
    ],
)
def test_what_changes_the_records_upstream_of_a_store_makes_it_stale(
    old: Any, new: Any, cause: str
) -> None:
    d = wordcount(name="count", upstream=old).diff(wordcount(name="count", upstream=new))
    assert not d.loses_state
    s = store(d, "wc-count-store")
    assert s.effect == "stale"
    assert cause in s.notes[-1]


def test_a_changed_key_function_makes_the_store_stale() -> None:
    d = wordcount(name="count", key=lambda w: w).diff(wordcount(name="count", key=str.upper))
    assert store(d, "wc-count-store").effect == "stale"
    assert "lines-keyBy-2 [keyBy] changed" in store(d, "wc-count-store").notes[-1]


def test_a_changed_aggregation_function_makes_its_own_store_stale() -> None:
    def build(fn: Callable[[int, int], int]) -> Topology:
        b = StreamBuilder("r")
        b.source("in").map(int).keyBy(lambda n: n % 2).reduce(fn, name="total").sink("out")
        return b.build()

    d = build(lambda a, b: a + b).diff(build(lambda a, b: max(a, b)))
    assert store(d, "r-total-store").effect == "stale"
    assert "total [reduce] changed" in store(d, "r-total-store").notes[-1]


def test_what_does_not_change_the_records_keeps_state_current() -> None:
    # A step that only moved (renamed, same code), a peek, a lambda moved in its file, a
    # new branch after the store, another queue count: nothing before a store or sink
    # computes anything else.
    base = wordcount(name="count")
    for new in (
        wordcount(name="count", upstream=lambda s: s.peek(print)),
        wordcount(name="count", key=lambda w: w),  # another lambda object, same code
    ):
        d = base.diff(new)
        assert not d.stale, d.describe()
    d = wordcount().diff(wordcount(upstream=lambda s: s.filter(bool)))
    assert store(d, "wc-lines-count-3-store").effect == "lost"  # lost, not stale


def test_a_stateless_pipeline_changed_upstream_of_its_sink_keeps_old_records() -> None:
    def build(fn: Callable[[str], str]) -> Topology:
        b = StreamBuilder("s")
        b.source("in").map(fn).sink("out")
        return b.build()

    d = build(str.upper).diff(build(str.lower))
    (out,) = [t for t in d.topics if t.new == "out"]
    assert (out.status, out.effect) == ("kept", "stale")
    assert d.stale and not d.loses_state
    assert not build(str.upper).diff(build(str.upper)).stale


@pytest.mark.parametrize(
    ("old", "new", "loses"),
    [
        (TumblingWindow(60_000), TumblingWindow(30_000), True),
        (TumblingWindow(60_000), HoppingWindow(60_000, 30_000), True),
        (TumblingWindow(60_000), TumblingWindow(60_000, grace=1_000), False),
    ],
)
def test_a_window_change_misreads_unless_only_the_grace_changed(
    old: Any, new: Any, loses: bool
) -> None:
    def build(window: Any) -> Topology:
        b = StreamBuilder("w")
        b.source("in").keyBy(str).window(window).count(name="per-key").sink("out")
        return b.build()

    d = build(old).diff(build(new))
    s = store(d, "w-per-key-store")
    assert s.status == "changed"
    assert (s.effect == "misread") is loses
    assert d.loses_state is loses
    assert any(note.startswith(f"window: {old} -> {new}") for note in s.notes)


def test_a_queue_count_change_misreads_the_store_and_its_topics() -> None:
    d = wordcount(name="count", queues=8).diff(wordcount(name="count", queues=4))
    assert store(d, "wc-count-store").effect == "misread"
    assert {(t.old, t.effect) for t in d.topics if t.status == "changed"} == {
        ("wc-count-shuffle", "misread"),
        ("wc-count-changelog", "misread"),
    }
    assert d.loses_state


def test_an_undeclared_queue_count_is_reported_but_not_a_loss() -> None:
    # Without a shuffle, a store is split like its source topic: queue count unknown
    # until a runtime creates the topic, so declaring one may well match.
    def build(queues: int | None) -> Topology:
        b = StreamBuilder("k")
        b.source("in", queues=queues).groupByKey().count(name="count").sink("out")
        return b.build()

    d = build(None).diff(build(8))
    s = store(d, "k-count-store")
    assert (s.status, s.effect, s.notes) == ("changed", "none", ("queues: ? -> 8",))
    assert not d.loses_state
    assert build(4).diff(build(8)).loses_state


def test_a_state_serde_change_makes_the_store_unreadable() -> None:
    def build(serde: str) -> Topology:
        b = StreamBuilder("a")
        b.source("in").keyBy(str).aggregate(
            list, lambda acc, v: [*acc, v], name="agg", serde=serde
        ).sink("out")
        return b.build()

    s = store(build("msgpack").diff(build("json")), "a-agg-store")
    assert s.effect == "misread"
    assert any("serde: msgpack -> json" in n for n in s.notes)


def test_a_new_branch_or_sink_loses_nothing() -> None:
    def build(extra: bool) -> Topology:
        b = StreamBuilder("wc")
        counts = b.source("lines").keyBy(str).count()
        counts.sink("counts")
        if extra:
            counts.toRStream().filter(lambda n: n > 1).sink("repeated")
        return b.build()

    d = build(False).diff(build(True))
    assert not d.loses_state
    assert [c.status for c in d.stores] == ["kept"]
    assert [(c.status, c.new) for c in d.topics if c.status != "kept"] == [("added", "repeated")]


def test_a_removed_aggregation_drops_its_store_without_counting_as_a_loss() -> None:
    def build(with_count: bool) -> Topology:
        b = StreamBuilder("j")
        lines = b.source("lines")
        lines.sink("copy")
        if with_count:
            lines.keyBy(str).count().sink("counts")
        return b.build()

    d = build(True).diff(build(False))
    assert [(c.status, c.effect) for c in d.stores] == [("removed", "dropped")]
    assert not d.loses_state
    d = build(False).diff(build(True))
    assert [(c.status, c.effect) for c in d.stores] == [("added", "new")]


def test_another_job_id_orphans_every_store_and_says_so() -> None:
    s = store(wordcount(job="wc").diff(wordcount(job="wc2")), "wc-lines-count-3-store")
    assert (s.new, s.effect) == ("wc2-lines-count-3-store", "lost")
    assert s.hint == 'keep the job id: StreamBuilder("wc")'


def test_a_sink_serde_change_misreads_what_the_topic_holds() -> None:
    def build(serde: str) -> Topology:
        b = StreamBuilder("s")
        b.source("in").map(str.upper).sink("out", serde)
        return b.build()

    d = build("json").diff(build("str"))
    (out,) = [t for t in d.topics if t.old == "out"]
    assert (out.status, out.effect) == ("changed", "misread")
    assert d.loses_state


# -- facts, fingerprints, output --------------------------------------------------------------


def test_fingerprints_follow_code_and_captured_values_not_locations() -> None:
    def make(n: int) -> Callable[[str], bool]:
        return lambda w: len(w) > n

    assert fingerprint(make(2)) == fingerprint(make(2))
    assert fingerprint(make(2)) != fingerprint(make(3))
    assert fingerprint(str.lower) != fingerprint(str.upper)
    assert fingerprint(lambda w: w.lower()) == fingerprint(
        lambda w: w.lower()  # another line, same code
    )


def test_fingerprints_survive_running_and_recursion() -> None:
    def make(n: int) -> Callable[[int], int]:
        def countdown(x: int) -> int:  # refers to itself through its closure
            return countdown(x - 1) if x else n

        return countdown

    f = make(1)
    before = fingerprint(f)
    for _ in range(5_000):  # the interpreter specializes hot code in place
        f(3)
    assert fingerprint(f) == before == fingerprint(make(1))
    assert fingerprint(make(2)) != before


def test_identity_round_trips_through_json_and_diffs_the_same() -> None:
    old = wordcount()
    new = wordcount(upstream=lambda s: s.filter(bool))
    saved = TopologyIdentity.from_json(identity(old).to_json())
    assert saved == identity(old)
    assert diff(saved, new).to_dict() == old.diff(new).to_dict()


@pytest.mark.parametrize(
    "text", ["", "{}", '{"format": 99}', '{"format": 1, "job_id": "x"}', "[1, 2]"]
)
def test_a_damaged_description_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a topology description|format"):
        TopologyIdentity.from_json(text)


def test_describe_and_json_tell_the_same_story() -> None:
    d = wordcount().diff(wordcount(upstream=lambda s: s.filter(bool)))
    text = d.describe()
    assert text.startswith("Topology diff: wc\n  Steps:\n")
    assert "LOST  wc-lines-count-3-store -> wc-lines-count-4-store [count]" in text
    assert text.endswith(
        "New input only: 1 topic(s) keep what the earlier version computed; "
        "--fresh recomputes from all input\n"
        "  State: would be lost or misread: 1 store(s) lost\n"
    )
    doc = json.loads(d.to_json())
    assert doc["format"] == 2
    assert doc["loses_state"] is True
    assert doc["stale"] is True  # the sink topic keeps what the old count wrote
    assert [s["effect"] for s in doc["stores"]] == ["lost"]
    assert [t["effect"] for t in doc["topics"] if t["new"] == "counts"] == ["stale"]
