"""TaskId: the text it writes is a stored format (file names, transaction records)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstreams.errors import RStreamsError
from rstreams.runtime.engine.tasks.taskid import MalformedTaskIdError, TaskId


def test_text_is_subtopology_underscore_queue() -> None:
    # The format tasks had on disk before TaskId existed: it must not change.
    assert str(TaskId(0, 0)) == "0_0"
    assert str(TaskId(3, 12)) == "3_12"
    assert f"{TaskId(1, 2)}.done" == "1_2.done"


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_parse_reads_back_what_str_writes(sub: int, queue: int) -> None:
    task = TaskId(sub, queue)
    assert TaskId.parse(str(task)) == task
    assert str(TaskId.parse(str(task))) == f"{sub}_{queue}"


@pytest.mark.parametrize(
    "text",
    ["", "_", "0", "0_", "_1", "0-1", "0_1_2", "a_1", "0_b", "-1_0", "0_-1", "+1_0", "01_2",
     "1_02", " 0_1", "0_1 ", "0_1\n", "0.0_1",
     "\uff11_\uff12"],  # full-width digits, which int() would take
)  # fmt: skip
def test_parse_refuses_anything_else_naming_the_text(text: str) -> None:
    with pytest.raises(MalformedTaskIdError, match=r"is not a task id: expected") as e:
        TaskId.parse(text)
    assert repr(text) in str(e.value)


def test_parse_refuses_a_non_string() -> None:
    with pytest.raises(MalformedTaskIdError, match="3 is not a task id"):
        TaskId.parse(3)  # type: ignore[arg-type]


def test_the_error_is_an_rstreams_error_and_a_value_error() -> None:
    assert issubclass(MalformedTaskIdError, RStreamsError)
    assert issubclass(MalformedTaskIdError, ValueError)


@pytest.mark.parametrize(("sub", "queue"), [(-1, 0), (0, -1), (True, 0), ("0", 1), (0, 1.0)])
def test_fields_are_whole_numbers(sub: object, queue: object) -> None:
    with pytest.raises(MalformedTaskIdError, match="must be a whole number >= 0"):
        TaskId(sub, queue)  # type: ignore[arg-type]


def test_frozen_hashable_and_ordered_as_numbers() -> None:
    task = TaskId(0, 2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        task.queue = 3  # type: ignore[misc]
    assert {TaskId(0, 2): "x"}[TaskId(0, 2)] == "x"
    ids = [TaskId(1, 0), TaskId(0, 10), TaskId(0, 2)]
    assert sorted(ids) == [TaskId(0, 2), TaskId(0, 10), TaskId(1, 0)]
    assert sorted(str(t) for t in ids) == ["0_10", "0_2", "1_0"]  # unlike their texts
