"""on_error = fail | skip | dead-letter, for user functions and undecodable input."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from rstreams import ProcessingError, RStreamsError, SerdeError, StreamBuilder, Topology
from rstreams.testing import TopologyTestDriver

THIS_FILE = Path(__file__).name


def explode_on_bad(value: str) -> str:
    if value == "bad":
        raise ValueError("cannot handle 'bad'")
    return value.upper()


CALLBACK_LINE = explode_on_bad.__code__.co_firstlineno


def mapping_job() -> Topology:
    b = StreamBuilder("errs")
    b.source("in").map(explode_on_bad, name="shout").sink("out", "str")
    return b.build()


def pipe_three(driver: TopologyTestDriver, topic: str = "in", bad: Any = "bad") -> None:
    driver.pipe(topic, "ok1" if topic == "in" else {"n": 1})
    driver.pipe(topic, bad)
    driver.pipe(topic, "ok2" if topic == "in" else {"n": 2})


# -- fail -------------------------------------------------------------------------------


def test_fail_raises_processing_error_naming_step_topic_queue_offset_and_callback() -> None:
    with TopologyTestDriver(mapping_job()) as driver:
        driver.pipe("in", "ok1")
        with pytest.raises(ProcessingError) as info:
            driver.pipe("in", "bad")
    err = info.value
    assert (err.step, err.topic, err.queue, err.offset) == ("shout", "in", 0, 1)
    message = str(err)
    assert "step 'shout'" in message
    assert "in[0]@1" in message
    assert f"explode_on_bad ({THIS_FILE}:{CALLBACK_LINE})" in message
    assert "ValueError: cannot handle 'bad'" in message
    assert "value='bad'" in message
    assert "on_error='skip' or 'dead-letter'" in message
    assert isinstance(err.__cause__, ValueError)
    assert isinstance(err, RStreamsError) and isinstance(err, RuntimeError)


def test_fail_names_a_lambda_with_its_line() -> None:
    b = StreamBuilder("lam")
    fn = lambda v: 1 // int(v)  # noqa: E731
    b.source("in").keyBy(len).sum(fn).sink("out")
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe("in", "4")
        with pytest.raises(ProcessingError, match=rf"<lambda> \({THIS_FILE}:\d+\)") as info:
            driver.pipe("in", "0")
    message = str(info.value)
    assert f"{THIS_FILE}:{fn.__code__.co_firstlineno}" in message
    assert "value='0'" in message and "ZeroDivisionError" in message
    # The engine may apply sum's function before the shuffle (map-side combine) or after
    # it; either way the step named is the sum's (or its shuffle half).
    assert info.value.step.startswith("in-sum-2")
    assert info.value.offset == 1


def test_fail_in_a_later_queue_reports_that_queue() -> None:
    b = StreamBuilder("q")
    b.source("in").map(explode_on_bad).sink("out", "str")
    with TopologyTestDriver(b.build(), queues={"in": 4}) as driver:
        with pytest.raises(ProcessingError) as info:
            driver.pipe("in", "bad", key="some-key")
        piped = driver.read("in")
    assert (info.value.topic, info.value.queue, info.value.offset) == (
        "in",
        piped[0].queue,
        piped[0].offset,
    )


def test_driver_context_keeps_the_original_error() -> None:
    # Leaving the `with` block closes (commits) the driver; the error that made us leave
    # must be the one that surfaces.
    with (
        pytest.raises(ProcessingError, match="step 'shout'"),
        TopologyTestDriver(mapping_job()) as driver,
    ):
        driver.pipe("in", "bad")


# -- skip -------------------------------------------------------------------------------


def test_skip_drops_only_the_bad_record_and_counts_it(caplog: pytest.LogCaptureFixture) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="rstreams.engine"),
        TopologyTestDriver(mapping_job(), on_error="skip") as driver,
    ):
        pipe_three(driver)
        assert driver.read_values("out") == ["OK1", "OK2"]
        assert driver.metrics["skipped"] == 1
        assert "dead_lettered" not in driver.metrics
    assert any("step 'shout'" in m and "(skipped)" in m for m in caplog.messages)


def test_skip_in_an_aggregation_leaves_its_state_untouched() -> None:
    b = StreamBuilder("agg")
    b.source("in", "json").keyBy(lambda v: "k").reduce(lambda a, v: a + 10 // v).sink("out")
    with TopologyTestDriver(b.build(), on_error="skip") as driver:
        driver.pipe_all("in", [1, 0, 2, 0, 5])
        assert driver.read_values("out") == [1, 6, 8]
        assert driver.state("agg-in-reduce-2-store") == {"k": 8}
        assert driver.metrics["skipped"] == 2


def test_skip_in_flat_map_emits_nothing_for_the_bad_record() -> None:
    def split_or_fail(line: str) -> list[str]:
        words = line.split()
        if "boom" in words:
            raise RuntimeError("boom")
        return words

    b = StreamBuilder("fm")
    b.source("in").flatMap(split_or_fail).sink("out", "str")
    with TopologyTestDriver(b.build(), on_error="skip") as driver:
        driver.pipe_all("in", ["a b", "c boom d", "e"])
        assert driver.read_values("out") == ["a", "b", "e"]
        assert driver.metrics == {"skipped": 1}


# -- dead-letter ------------------------------------------------------------------------


def test_dead_letter_writes_a_json_record_and_goes_on() -> None:
    with TopologyTestDriver(mapping_job(), on_error="dead-letter") as driver:
        pipe_three(driver)
        assert driver.read_values("out") == ["OK1", "OK2"]
        (dead,) = driver.read("errs-dead-letter")
        assert driver.metrics["skipped"] == 1
        assert driver.metrics["dead_lettered"] == 1
    assert dead.value["step"] == "shout"
    assert dead.value["topic"] == "in"
    assert dead.value["queue"] == 0
    assert dead.value["offset"] == 1
    assert dead.value["value"] == "bad"  # (JSON: the value itself, not its repr)
    assert dead.value["error"] == "ValueError: cannot handle 'bad'"


def test_dead_letter_topic_is_empty_while_nothing_fails() -> None:
    with TopologyTestDriver(mapping_job(), on_error="dead-letter") as driver:
        driver.pipe_all("in", ["a", "b"])
        assert driver.read("errs-dead-letter") == []
        assert driver.read_values("out") == ["A", "B"]
        assert driver.metrics == {}


# -- undecodable input ------------------------------------------------------------------


def test_invalid_utf8_fails_at_the_source() -> None:
    with TopologyTestDriver(mapping_job()) as driver, pytest.raises(ProcessingError) as info:
        driver.pipe("in", b"caf\xe9")
    err = info.value
    assert (err.step, err.topic, err.queue, err.offset) == ("source-in", "in", 0, 0)
    assert re.search(r"SerdeError: invalid UTF-8 at byte 3", str(err))
    assert isinstance(err.__cause__, SerdeError)


def test_invalid_utf8_is_skipped() -> None:
    with TopologyTestDriver(mapping_job(), on_error="skip") as driver:
        pipe_three(driver, bad=b"\xff\xfe")
        assert driver.read_values("out") == ["OK1", "OK2"]
        assert driver.metrics["skipped"] == 1


def json_job() -> Topology:
    b = StreamBuilder("js")
    b.source("events", "json").map(lambda e: e["n"] * 10).sink("out")
    return b.build()


def test_invalid_json_fails() -> None:
    with (
        TopologyTestDriver(json_job()) as driver,
        pytest.raises(
            ProcessingError, match=r"step 'source-events' .* events\[0\]@0 .*invalid JSON"
        ),
    ):
        driver.pipe("events", b"{not json")


def test_invalid_json_is_dead_lettered() -> None:
    with TopologyTestDriver(json_job(), on_error="dead-letter") as driver:
        pipe_three(driver, topic="events", bad=b"{not json")
        assert driver.read_values("out") == [10, 20]
        (dead,) = driver.read_values("js-dead-letter")
    assert dead["step"] == "source-events"
    assert dead["topic"] == "events"
    assert dead["offset"] == 1
    assert dead["value"] == "{not json"  # the bytes as read, UTF-8 text: as text
    assert "value_encoding" not in dead
    assert dead["error"].startswith("SerdeError: invalid JSON")


# -- records from input files: the file and line ---------------------------------------


def words_job() -> Topology:
    b = StreamBuilder("wl")
    b.source("lines").flatMap(str.split).keyBy(lambda w: w).count().sink("counts")
    return b.build()


def bad_file(path: Path, lines: int, bad_at: int, *, crlf: bool = False, last_nl: bool = True):
    """``lines`` lines, the one at ``bad_at`` (from 1) invalid UTF-8."""
    end = b"\r\n" if crlf else b"\n"
    rows = [b"caf\xe9 x" if i == bad_at else b"w%d y" % (i % 7) for i in range(1, lines + 1)]
    path.write_bytes(end.join(rows) + (end if last_nl else b""))
    return path


@pytest.mark.parametrize(
    ("lines", "bad_at", "crlf", "last_nl"),
    [
        (1000, 1, False, True),
        (1000, 777, False, True),
        (1000, 777, True, True),  # \r\n line ends
        (1000, 1000, False, False),  # the last line, without a line end
        (1000, 64, False, True),  # the last line of a chunk
        (1000, 65, False, True),  # the first line of the next one
    ],
)
def test_a_bad_record_of_an_input_file_names_the_file_and_line(
    tmp_path, lines, bad_at, crlf, last_nl
) -> None:
    """Not only the log position (queue and offset say nothing of the file): the error
    names the input file and the line, whatever the chunking and queue count."""
    from rstreams import run

    data = bad_file(tmp_path / "in.txt", lines, bad_at, crlf=crlf, last_nl=last_nl)
    with pytest.raises(ProcessingError) as info:
        run(words_job(), {"lines": str(data)}, chunk_lines=64)
    message = str(info.value)
    assert re.search(rf"at lines\[0\]@{bad_at - 1}: \S*in\.txt line {bad_at} \(", message), message
    assert "invalid UTF-8" in message


def test_bad_records_of_an_input_file_are_dead_lettered_with_file_line_and_bytes(
    tmp_path, caplog
) -> None:
    """Dead letters keep the bytes read, base64 when they are not UTF-8 (tools can read
    them back, unlike a Python repr), and the file and line; so does the warning."""
    import base64

    from rstreams import run

    data = tmp_path / "in.txt"
    rows = [b"a b"] * 300
    rows[149] = b"caf\xe9 \xff"
    rows[250] = b"\xfe"
    data.write_bytes(b"\n".join(rows) + b"\n")
    with caplog.at_level(logging.WARNING, logger="rstreams.engine"):
        result = run(words_job(), {"lines": str(data)}, chunk_lines=100, on_error="dead-letter")
    dead = result.dead_letters
    assert [(d["file"], d["line"], d["offset"]) for d in dead] == [
        (str(data), 150, 149),
        (str(data), 251, 250),
    ]
    assert [d["value_encoding"] for d in dead] == ["base64", "base64"]
    assert [base64.b64decode(d["value"]) for d in dead] == [b"caf\xe9 \xff", b"\xfe"]
    assert result.tables["counts"]["a"] == 298
    warned = [r.getMessage() for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert len(warned) == 2 and "in.txt line 150 (" in warned[0], warned


def test_records_not_read_from_a_file_name_no_line() -> None:
    """The test driver's records come from no file: the log position alone."""
    with TopologyTestDriver(mapping_job()) as driver, pytest.raises(ProcessingError) as info:
        driver.pipe("in", b"caf\xe9")
    assert "at in[0]@0 (key=None" in str(info.value)


# -- unstorable state and unwritable output ---------------------------------------------


def test_unstorable_aggregate_value_raises_serde_error_naming_the_step() -> None:
    b = StreamBuilder("sets")
    (
        b.source("in")
        .keyBy(len)
        .aggregate(set, lambda acc, v: acc | {v}, name="uniq")
        .sink("out", serializer=lambda s: repr(sorted(s)).encode())
    )
    # The value can not be committed, so closing the driver fails the same way: keep
    # pytest.raises outside the driver's block.
    with (
        pytest.raises(
            SerdeError, match=r"step 'uniq' \(aggregate\) .* key 1: a set can not be stored"
        ),
        TopologyTestDriver(b.build()) as driver,
    ):
        driver.pipe("in", "a")


def test_unserializable_sink_value_is_a_processing_error_of_the_sink() -> None:
    b = StreamBuilder("out")
    b.source("in").map(lambda v: {v}).sink("sets")  # JSON sink, set value
    with (
        TopologyTestDriver(b.build()) as driver,
        pytest.raises(ProcessingError, match=r"step 'in-sink-2'.*not JSON-serializable"),
    ):
        driver.pipe("in", "a")
    with TopologyTestDriver(b.build(), on_error="skip") as driver:
        driver.pipe("in", "a")
        assert driver.read("sets") == []
        assert driver.metrics["skipped"] == 1


def test_dead_letters_hold_json_values_as_json_and_the_rest_as_marked_text() -> None:
    """Before, keys and values were Python reprs ("key": "None", "value": "'ts,...'")."""
    from rstreams.runtime.results import letter_fields

    assert letter_fields("key", None) == {"key": None}
    assert letter_fields("value", {"a": [1, 2.5, "x"]}) == {"value": {"a": [1, 2.5, "x"]}}
    assert letter_fields("value", "ts,1") == {"value": "ts,1"}
    assert letter_fields("value", {1, 2}) == {"value": "{1, 2}", "value_encoding": "repr"}
    assert letter_fields("value", b"\xff") == {"value": "/w==", "value_encoding": "base64"}
    assert letter_fields("value", float("nan")) == {"value": "nan", "value_encoding": "repr"}
    cut = letter_fields("value", "x" * 50, limit=20)
    assert cut == {"value": repr("x" * 50)[:17] + "...", "value_encoding": "repr"}
