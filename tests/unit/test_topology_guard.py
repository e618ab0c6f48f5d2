"""What a resumed run says when a changed pipeline leaves a kept store or sink topic with
what the earlier version computed (the words of rstreams run's warnings)."""

from __future__ import annotations

from pathlib import Path

from rstreams import StreamBuilder, Topology
from rstreams.runtime.topology_guard import check_topology, stale_at_end, stale_at_start


def wordcount(case: str, *, store: bool = True) -> Topology:
    b = StreamBuilder("wc")
    words = b.source("lines").flatMap(str.split).map(getattr(str, case))
    if store:
        words.keyBy(str).count(name="n").sink("out")
    else:
        words.sink("out")
    return b.build()


def test_check_topology_returns_a_stale_change_and_records_it(tmp_path: Path) -> None:
    assert check_topology(tmp_path, wordcount("lower")) is None
    d = check_topology(tmp_path, wordcount("upper"))  # nothing lost: recorded, no refusal
    assert d is not None and d.stale and not d.loses_state
    assert [c.name for c in d.stale_changes] == ["out", "wc-n-store"]
    assert check_topology(tmp_path, wordcount("upper")) is None  # the job's topology now


def test_the_words_name_the_change_the_inputs_and_what_is_stale() -> None:
    d = wordcount("lower").diff(wordcount("upper"))
    start = stale_at_start("wc", d, ["a.txt", "b.txt"], [])
    assert start.startswith(
        "job 'wc' resumes with a changed pipeline (lines-map-2 [map] changed) and no new "
        "input: a.txt and b.txt were consumed by an earlier run and not read again, so no "
        "record will go through the changed steps"
    )
    assert "topic out and store wc-n-store keep what the earlier version computed" in start
    assert start.endswith("Run with --fresh to recompute from all input with this version")
    assert "the change applies to new input only (the rest of b.txt)" in stale_at_start(
        "wc", d, ["a.txt", "b.txt"], ["b.txt"]
    )
    end = stale_at_end(d, 0, ["a.txt"])
    assert end.startswith("no new input: a.txt was already consumed by an earlier run")
    assert "the table the earlier version of the pipeline computed (topic out and store" in end
    assert stale_at_end(d, 1_234, ["a.txt"]).startswith(
        "only the 1,234 new input record(s) went through the changed pipeline "
        "(lines-map-2 [map] changed): topic out and store wc-n-store also hold"
    )
    one = wordcount("lower", store=False).diff(wordcount("upper", store=False))
    assert "; topic out keeps what" in stale_at_start("wc", one, ["a.txt"], [])
    assert ": topic out also holds what" in stale_at_end(one, 5, ["a.txt"])
