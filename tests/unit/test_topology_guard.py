"""What a resumed run says when a changed pipeline leaves a kept store or sink topic with
what the earlier version computed (the words of rstreams run's warnings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rstreams import HoppingWindow, StreamBuilder, Topology, TumblingWindow
from rstreams.dsl.windows import Window
from rstreams.planner.diff import TopologyChangeError
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


def clicks(window: Window, *, name: str | None = "per-user", filtered: bool = False) -> Topology:
    b = StreamBuilder("clicks")
    s = b.source("clicks", "json")
    if filtered:
        s = s.filter(lambda c: c["user"])
    s.keyBy(lambda c: c["user"]).window(window).count(name=name).sink("out")
    return b.build()


def _refused(tmp_path: Path, old: Topology, new: Topology) -> str:
    check_topology(tmp_path, old)
    with pytest.raises(TopologyChangeError) as e:
        check_topology(tmp_path, new)
    return str(e.value)


def test_a_refusal_without_renames_says_what_changed_not_name(tmp_path: Path) -> None:
    hopping = HoppingWindow(600_000, advance=60_000)
    message = _refused(tmp_path, clicks(hopping), clicks(TumblingWindow(300_000)))
    # The window as `rstreams describe` prints it, fields in the DSL's order (the old
    # one comes back from the job's JSON, its keys sorted).
    assert (
        "window: hopping size=600000 ms, advance=60000 ms, grace=0 ms -> "
        "tumbling size=300000 ms, grace=0 ms"
    ) in message
    footer = message.splitlines()[-1]
    assert "renamed" not in footer and "name=" not in footer
    assert footer.startswith(
        "Store clicks-per-user-store was written with other window bounds: start "
        "the job over with --fresh (or give it a new job id) to build it anew"
    )
    assert "--allow-topology-change" in footer


def test_a_refusal_with_a_rename_says_name(tmp_path: Path) -> None:
    window = TumblingWindow(60_000)
    old, new = clicks(window, name=None), clicks(window, name=None, filtered=True)
    footer = _refused(tmp_path, old, new).splitlines()[-1]
    assert footer.startswith(
        "Keep the state by giving the renamed steps their old names with name="
    )
    assert "window bounds" not in footer
