"""Runs of built-ins over a whole batch (rstreams.runtime.engine.operators.fused) give the records
the per-record definition gives, on the test driver (batches of one) and the engine
(batches of many), with non-str values following on_error as before."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstreams import StreamBuilder, run
from rstreams import functions as F
from rstreams.runtime.engine.operators.fused import JOINABLE
from rstreams.testing import TopologyTestDriver

# Map built-ins a run may hold, and the flatMap patterns it may end with.
MAPS = [F.lower(), F.upper(), F.strip(), F.identity()]
CHARS = (
    # final sigma, and case-ignorable marks around it
    "aAzZ_ 1\t\n.'\u2019·:-Σσς\u0391\u0392\u039f\u0394"
    "\u0301\u0345\u200d\u00ad"  # combining acute, ypogegrammeni, ZWJ, soft hyphen
    "٣३߃"  # digits of other scripts
    "İıßŉǅ\u00a0\u2028\u3000ﬃ"  # special casings, Unicode whitespace
)
texts = st.text(st.sampled_from(CHARS), max_size=14) | st.text(max_size=6)
others = st.integers(-5, 5) | st.none() | st.lists(st.text(max_size=2))
# Half the lists all str (the fused path), half with other values (record by record).
values = st.lists(texts, max_size=30) | st.lists(texts | others, max_size=30)
chains = st.tuples(st.lists(st.sampled_from(MAPS), max_size=3), st.sampled_from(sorted(JOINABLE)))


def expected(maps: list[Any], pattern: str, vs: list[Any]) -> tuple[list[str], int]:
    """The per-record definition: the words in order, and the values that fail."""
    words: list[str] = []
    failed = 0
    for v in vs:
        if not isinstance(v, str):  # the first step fails on it: skipped
            failed += 1
            continue
        for m in maps:
            v = m(v)
        words += re.findall(pattern, v)
    return words, failed


def job(maps: list[Any], pattern: str, seen: list[str]) -> StreamBuilder:
    b = StreamBuilder("fused")
    s = b.source("in", deserializer="json")
    for m in maps:
        s = s.map(m)
    s.flatMap(F.findall(pattern)).foreach(seen.append)
    return b


@settings(max_examples=120, deadline=None)
@given(chain=chains, vs=values)
def test_the_driver_gives_the_per_record_words(chain: Any, vs: list[Any]) -> None:
    maps, pattern = chain
    seen: list[str] = []
    with TopologyTestDriver(job(maps, pattern, seen).build(), on_error="skip") as d:
        d.pipe_all("in", vs)
        skipped = d.metrics.get("skipped", 0)
    words, failed = expected(maps, pattern, vs)
    assert seen == words
    assert skipped == failed


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chain=chains, vs=values)
def test_the_engine_gives_the_per_record_words_a_batch_at_a_time(
    chain: Any, vs: list[Any], tmp_path: Path
) -> None:
    maps, pattern = chain
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(v) + "\n" for v in vs), encoding="utf-8")
    seen: list[str] = []
    result = run(job(maps, pattern, seen).build(), {"in": str(data)}, on_error="skip")
    words, failed = expected(maps, pattern, vs)
    assert seen == words
    assert result.metrics.get("skipped", 0) == failed


def test_a_failure_behind_a_fused_run_names_its_input_record(tmp_path: Path) -> None:
    """Offsets of the fused output are worked out when a later step fails on a word,
    and the records' headers (the input chunk's mark) still reach the right words."""
    data = tmp_path / "in.txt"
    lines = [f"Line {i} ΟΔΟΣ" if i != 7 else "Boom here" for i in range(40)]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def fail_on_boom(w: str) -> str:
        if w == "boom":
            raise ValueError("boom")
        return w

    b = StreamBuilder("fused")
    b.source("lines").map(F.lower()).flatMap(F.words()).map(fail_on_boom).keyBy(
        F.identity()
    ).count().toRStream().sink("counts")
    result = run(b.build(), {"lines": str(data)}, chunk_lines=16, on_error="dead-letter")
    assert [(d["line"], d["offset"]) for d in result.dead_letters] == [(8, 7)]
    counts = result.tables["counts"]
    assert counts["οδος"] == 39 and counts["line"] == 39 and counts["here"] == 1
