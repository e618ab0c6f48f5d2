"""Structured Streaming: RocksDB state with changelog checkpointing; a run with the same
checkpoint reads only new files and continues every count."""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rstreams import Topology
from rstreams.runtime.spark import run_spark

pytestmark = pytest.mark.slow


def counts(*texts: str) -> dict[str, int]:
    lines = [line for text in texts for line in text.splitlines()]
    return dict(collections.Counter(w for line in lines for w in re.findall(r"\w+", line.lower())))


def test_restart_continues_counts_from_the_checkpoint(
    example_topology: Callable[[str], Topology], spark: Any, tmp_path: Path
) -> None:
    topology = example_topology("wordcount")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    checkpoint = tmp_path / "checkpoint"
    out = tmp_path / "counts.jsonl"
    first_text = "the cat saw the dog\nThe end\n"
    (inbox / "001.txt").write_text(first_text)

    def run() -> Any:
        return run_spark(
            topology,
            {"sentences": str(inbox)},
            spark=spark,
            streaming=True,
            checkpoint=str(checkpoint),
            outputs={"word-counts": str(out)},
        )

    first = run()
    assert first.tables["word-counts"] == counts(first_text)
    assert first.records_in == 2

    second_text = "a dog and a cat\n"
    (inbox / "002.txt").write_text(second_text)
    second = run()
    assert second.records_in == 1  # only the new file was read
    assert second.tables["word-counts"] == counts(first_text, second_text)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["key"]: r["value"] for r in rows} == counts(first_text, second_text)

    # The counts live in Spark's RocksDB state store, checkpointed as changelogs.
    changelogs = list(checkpoint.glob("**/state/**/*.changelog"))
    assert changelogs, sorted(str(p) for p in checkpoint.rglob("*"))[:50]
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass").endswith(
        "RocksDBStateStoreProvider"
    )

    third = run()  # nothing new: nothing changes
    assert third.records_in == 0
    assert third.tables["word-counts"] == counts(first_text, second_text)


def test_stateless_sink_keeps_the_last_value_per_key_across_batches(
    spark: Any, tmp_path: Path
) -> None:
    """Without an aggregation the table is the last record per key, in source order
    (rows are numbered on streaming, where Spark has no row ids)."""
    from rstreams import StreamBuilder
    from rstreams import functions as F
    from rstreams.testing import TopologyTestDriver

    b = StreamBuilder("latest")
    b.source("in").keyBy(lambda line: line[:1]).toRStream().map(F.upper()).sink("out")
    topology = b.build()
    inbox = tmp_path / "in"
    inbox.mkdir()
    first, second = ["apple", "avocado", "banana", "apricot"], ["blueberry", "cherry"]
    (inbox / "1.txt").write_text("\n".join(first) + "\n")
    ckpt = str(tmp_path / "ck")
    got = run_spark(topology, {"in": str(inbox)}, spark=spark, streaming=True, checkpoint=ckpt)
    assert got.tables["out"] == {"a": "APRICOT", "b": "BANANA"}
    (inbox / "2.txt").write_text("\n".join(second) + "\n")
    got = run_spark(topology, {"in": str(inbox)}, spark=spark, streaming=True, checkpoint=ckpt)
    with TopologyTestDriver(topology) as driver:
        driver.pipe_all("in", first + second)
        assert got.tables["out"] == driver.read_table("out")


def test_a_checkpoint_resumed_with_other_code_is_guarded_as_the_embedded_runtime_is(
    spark: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: a rerun on the same checkpoint with another tokenizer exited 0 with a mix
    of both versions' counts and said nothing. Now the checkpoint records the pipeline's
    identity (code and the globals it reads): a stale change is said at the start and at
    the end, one that would lose or misread state is refused, as on the embedded runtime."""
    from rstreams.loader import load_topology
    from rstreams.planner.diff import TopologyChangeError

    cases = Path(__file__).resolve().parents[1] / "golden" / "diff"
    inbox, checkpoint = tmp_path / "inbox", tmp_path / "checkpoint"
    inbox.mkdir()
    (inbox / "001.txt").write_text("the cat saw the dog\n")

    def run(case: str, version: str) -> Any:
        topology = load_topology(str(cases / case / f"{version}.py"))
        return run_spark(
            topology, {"sentences": str(inbox)}, spark=spark, streaming=True,
            checkpoint=str(checkpoint),
        )  # fmt: skip

    run("changed_global", "old")
    assert (checkpoint / "topology.json").is_file()
    caplog.clear()
    with caplog.at_level("WARNING", logger="rstreams.spark"):
        run("changed_global", "old")  # the same code: nothing said
    assert not [r for r in caplog.records if "changed pipeline" in r.getMessage()]
    (inbox / "002.txt").write_text("a dog\n")
    with caplog.at_level("WARNING", logger="rstreams.spark"):
        second = run("changed_global", "new")  # WORD is another regex
    said = [r.getMessage() for r in caplog.records]
    assert any("resumes with a changed pipeline" in m and "--checkpoint" in m for m in said), said
    assert any("only the 1 new input record(s)" in m for m in said), said
    assert second.records_in == 1
    with pytest.raises(TopologyChangeError, match="a new --checkpoint directory"):
        run("insert_filter", "new")  # the count's store would be orphaned
    # From the command line: exit 2 (before any Spark job), with hints that work on Spark.
    from rstreams.cli import main

    new = str(cases / "insert_filter" / "new.py")
    args = ["run", new, "--backend", "spark", "--streaming", "--checkpoint", str(checkpoint)]
    assert main([*args, "--input", str(inbox)]) == 2
    err = capsys.readouterr().err
    assert "would lose or misread its state" in err and "LOST" in err
    assert "--fresh" not in err and "a new --checkpoint directory" in err
