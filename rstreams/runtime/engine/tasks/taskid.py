"""The identity of a task: one sub-topology of a topology on one queue.

A task's text, ``<sub-topology>_<queue>``, names it on disk (its lock, its end-of-input
mark, its skipped-record counts, its restore progress) and in the job's transaction
topic, so that text is a stored format: :class:`TaskId` writes it and reads it back, and
nothing else should format or split it.
"""

from __future__ import annotations

import re

import attrs

from rstreams.errors import RStreamsError

_TEXT = re.compile(r"(0|[1-9][0-9]*)_(0|[1-9][0-9]*)")


class MalformedTaskIdError(RStreamsError, ValueError):
    """A text that is not a task id (``<sub-topology>_<queue>``, two whole numbers)."""


def _whole_number(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    # bool is an int to Python, but True_0 is no task.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise MalformedTaskIdError(
            f"a task's {attribute.name} must be a whole number >= 0; got {value!r}"
        )


@attrs.frozen(order=True)
class TaskId:
    """Sub-topology ``subtopology`` running on queue ``queue``; ordered by both, as numbers.

    >>> task = TaskId(1, 3)
    >>> str(task)
    '1_3'
    >>> TaskId.parse("1_3") == task
    True
    >>> [str(t) for t in sorted([TaskId(0, 10), TaskId(1, 0), TaskId(0, 2)])]
    ['0_2', '0_10', '1_0']
    >>> TaskId.parse("1-3")
    Traceback (most recent call last):
    ...
    rstreams.runtime.engine.tasks.taskid.MalformedTaskIdError: '1-3' is not a task id: ...
    """

    subtopology: int = attrs.field(validator=_whole_number)
    queue: int = attrs.field(validator=_whole_number)

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.queue}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """The task named ``text``, as :meth:`__str__` writes it; refuses any other text
        (so ``parse(s)`` succeeds exactly when ``str(parse(s)) == s``)."""
        match = _TEXT.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise MalformedTaskIdError(
                f"{text!r} is not a task id: expected '<sub-topology>_<queue>', two whole "
                "numbers without sign or leading zeros, such as '0_3'; was the file or "
                "record it came from written by rstreams?"
            )
        return cls(int(match[1]), int(match[2]))
