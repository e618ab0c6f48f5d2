"""The in-process run's shortcuts give what the general paths give: a combined count
that drops None keys and sorts out unhashable ones, keyBy of an identity function,
flatMap's repeated headers, and commits only every in_process_commit_interval."""

from __future__ import annotations

from pathlib import Path

import pytest

import rstreams.runner
from rstreams import StreamBuilder
from rstreams.runtime.engine.operators.batch import Batch
from rstreams.testing import TopologyTestDriver

# Keys: the text before ":"; None when empty; a list (unhashable) for "L".
LINES = ["a:1", ":2", "b:3", "L:4", "a:5", ":6", "L:7", "b:8", "c:9"]


def key_of(line: str) -> object:
    k = line.split(":")[0]
    return [k] if k == "L" else (k or None)


def counted(key_fn: object = key_of) -> StreamBuilder:
    b = StreamBuilder("c")
    b.source("in").keyBy(key_fn).count(name="n").toRStream().sink("out")
    return b


@pytest.mark.parametrize("chunk_lines", [1, 3, 100])
def test_a_combined_count_skips_none_and_unhashable_keys_as_the_driver_does(
    tmp_path: Path, chunk_lines: int
) -> None:
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n")
    result = rstreams.run(
        counted().build(), {"in": str(path)}, on_error="skip", chunk_lines=chunk_lines
    )
    assert result.tables["out"] == {"a": 2, "b": 2, "c": 1}
    assert result.metrics["null_keys"] == 2 and result.metrics["skipped"] == 2
    with TopologyTestDriver(counted().build(), on_error="skip") as d:
        for line in LINES:
            d.pipe("in", line)
        assert d.metrics["null_keys"] == 2 and d.metrics["skipped"] == 2


def test_key_by_an_identity_function_keys_by_the_value(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("x\ny\nx\n")
    same = rstreams.run(counted(lambda w: w).build(), {"in": str(path)})
    assert same.tables["out"] == {"x": 2, "y": 1}


def test_repeated_headers_equal_the_general_repetition() -> None:
    h1, h2 = (("h", b"1"),), (("h", b"2"),)
    for headers in ([(), (), h1], [h1, (), h2], [(), h1, ()], [h1, h1, h1]):
        batch = Batch("t", 0, [None] * 3, ["a", "b", "c"], [1, 1, 1], [0, 1, 2], headers)
        out = batch.expand([2, 0, 3], list("vwxyz"))
        assert out.headers == [headers[0]] * 2 + [headers[2]] * 3
        assert out.offsets == [0, 0, 2, 2, 2]


def test_an_in_process_run_folds_every_commit_and_drops_consumed_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit every chunk and none before the end give the same table; input read to
    its end is dropped after each chunk either way."""
    path = tmp_path / "in.txt"
    path.write_text("".join(f"{i % 7}:{i}\n" for i in range(100)))
    tables = []
    for interval in (0.0, 3600.0):
        seen: list[rstreams.runner.Progress] = []
        result = rstreams.run(
            counted().build(),
            {"in": str(path)},
            chunk_lines=10,
            in_process_commit_interval=interval,
            progress=seen.append,
        )
        tables.append(result.tables["out"])
        # (a commit after every chunk of 7 keys; none before the end)
        assert seen[-1].records_out == (70 if interval == 0.0 else 0)
    assert tables[0] == tables[1] == {str(k): (15 if k < 2 else 14) for k in range(7)}
