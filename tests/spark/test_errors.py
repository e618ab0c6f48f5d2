"""Bad input and failing functions on Spark: clear errors naming the step, the file and
the line, or the documented skip / dead-letter behaviour; never a half-written sink."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import pytest

from rstreams import ConfigError, ProcessingError, StreamBuilder, UnsupportedOperation
from rstreams import functions as F
from rstreams.dsl import nodes as n
from rstreams.runtime.spark import SUPPORTED, run_spark

pytestmark = pytest.mark.slow

THIS_FILE = Path(__file__).name


def parse(line: str) -> int:
    return 10 // int(line)


PARSE_LINE = parse.__code__.co_firstlineno


def divide_job() -> Any:
    b = StreamBuilder("div")
    b.source("numbers").map(parse).keyBy(lambda v: v % 2).sum().sink("sums")
    return b.build()


@pytest.fixture
def numbers(tmp_path: Path) -> Path:
    path = tmp_path / "n.txt"
    path.write_text("1\n2\n0\n5\n")
    return path


def test_missing_input_path(spark: Any, tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    with pytest.raises(ConfigError, match=r"missing.txt' does not exist"):
        run_spark(divide_job(), {"numbers": str(missing)}, spark=spark)
    with pytest.raises(ConfigError, match="matches no file"):
        run_spark(divide_job(), {"numbers": str(tmp_path / "*.nope")}, spark=spark)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_input(spark: Any, numbers: Path) -> None:
    numbers.chmod(0)
    with pytest.raises(ConfigError, match="can not read input file"):
        run_spark(divide_job(), {"numbers": str(numbers)}, spark=spark)


def test_user_function_fails_names_step_file_line_and_function(
    spark: Any, numbers: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sums.jsonl"
    out.write_text('{"key": "old", "value": 1}\n')
    with pytest.raises(ProcessingError) as info:
        run_spark(divide_job(), {"numbers": str(numbers)}, spark=spark, outputs={"sums": str(out)})
    err = info.value
    message = str(err)
    assert (err.step, err.topic, err.offset) == ("numbers-map-1", "numbers", 2)
    assert f"{numbers} line 3" in message
    assert "value='0'" in message
    assert f"parse ({THIS_FILE}:{PARSE_LINE})" in message
    assert "ZeroDivisionError" in message
    assert "on_error='skip' or 'dead-letter'" in message
    # The failed run left the previous output as it was (no half-written table).
    assert out.read_text() == '{"key": "old", "value": 1}\n'
    assert not list(tmp_path.glob(".sums.jsonl*"))


def test_on_error_skip_and_dead_letter(spark: Any, numbers: Path, tmp_path: Path) -> None:
    skipped = run_spark(divide_job(), {"numbers": str(numbers)}, spark=spark, on_error="skip")
    # 10 // 1 = 10 and 10 // 5 = 2 have key 0, 10 // 2 = 5 has key 1; "0" is skipped
    assert skipped.tables["sums"] == {0: 12, 1: 5}
    assert skipped.metrics["skipped"] == 1
    dead = tmp_path / "dead.jsonl"
    result = run_spark(
        divide_job(),
        {"numbers": str(numbers)},
        spark=spark,
        on_error="dead-letter",
        outputs={"div-dead-letter": str(dead)},
    )
    assert result.tables["sums"] == {0: 12, 1: 5}
    assert result.metrics["dead_lettered"] == 1
    (letter,) = [json.loads(line) for line in dead.read_text().splitlines()]
    assert letter["step"] == "numbers-map-1" and letter["value"] == "0"
    assert letter["error"].startswith("ZeroDivisionError")
    assert result.dead_letters == [letter]


def test_failure_inside_an_aggregation_names_it(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\nb\nbad\nc\n")

    def concat(acc: str, v: str) -> str:
        if v == "bad":
            raise ValueError("no bad values")
        return acc + v

    b = StreamBuilder("agg")
    b.source("in").keyBy(lambda v: 1).reduce(concat, name="concat").sink("out")
    with pytest.raises(ProcessingError) as info:
        run_spark(b.build(), {"in": str(path)}, spark=spark)
    message = str(info.value)
    assert "step 'concat'" in message and "ValueError: no bad values" in message
    assert f"{path} line 3" in message and "value='bad'" in message
    skipped = run_spark(b.build(), {"in": str(path)}, spark=spark, on_error="skip")
    assert skipped.tables["out"] == {1: "abc"} and skipped.metrics["skipped"] == 1


def test_undecodable_json_line(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"user": "a"}\n{"user": "b"}\n{"user": oops}\n{"user": "a"}\n')
    b = StreamBuilder("events")
    b.source("events", deserializer="json").keyBy(lambda e: e["user"]).count().sink("n")
    with pytest.raises(ProcessingError) as info:
        run_spark(b.build(), {"events": str(path)}, spark=spark)
    message = str(info.value)
    assert "step 'source-events'" in message and f"{path} line 3" in message
    assert "SerdeError: invalid JSON" in message
    skipped = run_spark(b.build(), {"events": str(path)}, spark=spark, on_error="skip")
    assert skipped.tables["n"] == {"a": 2, "b": 1}


def test_native_builtin_failure_names_step_and_file(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"user": "a"}\n{"user": [1]}\n')
    b = StreamBuilder("native")
    b.source("events").map(F.json_field("user"), name="user").keyBy(F.identity()).count().sink("n")
    with pytest.raises(ProcessingError) as info:
        run_spark(b.build(), {"events": str(path)}, spark=spark)
    message = str(info.value)
    assert "step 'user'" in message and "F.json_field('user')" in message
    assert f"{path} line 2" in message and "JSON object or array" in message


@attrs.frozen(kw_only=True, eq=False, repr=False)
class WindowNode(n.Node):
    kind = "window"


def test_unsupported_node_names_the_step(spark: Any, numbers: Path) -> None:
    b = StreamBuilder("win")
    src = b.source("numbers")
    src.sink("out")
    topology = b.build()
    # A step the Spark backend has no rule for (the embedded planner has none either,
    # so it is added to the logical graph after the build).
    b.pipeline.add(WindowNode, (src.node,), "my-window")
    assert WindowNode not in SUPPORTED
    with pytest.raises(UnsupportedOperation) as info:
        run_spark(topology, {"numbers": str(numbers)}, spark=spark)
    assert str(info.value) == (
        "no translation rule for WindowNode (step 'my-window') on backend 'spark'"
    )


def test_streaming_rejects_an_aggregation_of_an_aggregation(spark: Any, tmp_path: Path) -> None:
    b = StreamBuilder("twice")
    counts = b.source("in").keyBy(lambda v: v).count()
    counts.toRStream().keyBy(lambda c: c).count(name="count-of-counts").sink("out")
    (tmp_path / "in").mkdir()
    with pytest.raises(UnsupportedOperation, match="step 'count-of-counts'"):
        run_spark(
            b.build(),
            {"in": str(tmp_path / "in")},
            spark=spark,
            streaming=True,
            checkpoint=str(tmp_path / "ck"),
        )


def test_streaming_skip_counts_python_and_native_failures(spark: Any, tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "1.jsonl").write_text('{"n": "1"}\n{"n": "x"}\nnot json\n{"n": "2"}\n')
    b = StreamBuilder("skips")
    (
        b.source("in")
        .map(F.json_field("n"), name="field")  # native: fails on "not json"
        .map(int, name="parse")  # Python: fails on "x"
        .keyBy(lambda v: v % 2)
        .count()
        .sink("out")
    )
    result = run_spark(
        b.build(),
        {"in": str(inbox)},
        spark=spark,
        streaming=True,
        checkpoint=str(tmp_path / "ck"),
        on_error="skip",
    )
    assert result.tables["out"] == {1: 1, 0: 1}
    assert result.metrics["skipped"] == 2
