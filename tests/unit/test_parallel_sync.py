"""The file log's syncs done at once: ``in_parallel``, a flush of several queues, and a
batch of offset commits (``FileBroker.commit_many``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rstreams.runtime.faults import set_faults
from rstreams.runtime.queues import FileBroker, filelog
from rstreams.runtime.queues._files import in_parallel


@pytest.fixture
def faults() -> Iterator[Callable[[str], None]]:
    yield set_faults
    set_faults("")


def test_in_parallel_runs_every_call_then_raises_the_first_error() -> None:
    done: list[int] = []
    lock = threading.Lock()

    def ok(i: int) -> Callable[[], None]:
        def call() -> None:
            with lock:
                done.append(i)

        return call

    def fails(message: str) -> Callable[[], None]:
        def call() -> None:
            raise OSError(5, message)

        return call

    in_parallel([ok(i) for i in range(20)])
    assert sorted(done) == list(range(20))
    done.clear()
    with pytest.raises(OSError, match="first"):
        in_parallel([ok(0), fails("first"), ok(2), fails("second"), ok(4)])
    assert sorted(done) == [0, 2, 4]  # the others ran to their end all the same


def test_a_flush_of_many_queues_makes_each_durable(tmp_path: Path) -> None:
    with FileBroker(tmp_path) as b:
        b.create_topic("t", 6)
        for q in range(6):
            b.append("t", q, [(0, None, b"x", ())] * (q + 1))
        b.flush()
        for q in range(6):
            durable = tmp_path / "topics" / "t" / str(q) / filelog.DURABLE_FILE
            assert filelog.parse_durable(durable.read_text())[2] == q + 1


def test_commit_many_commits_each_offset(tmp_path: Path) -> None:
    with FileBroker(tmp_path) as b:
        b.create_topic("t", 3)
        b.create_topic("u", 2)
        for q in range(3):
            b.append("t", q, [(0, None, b"x", ())] * 3)
        b.commit_many([("g", "t", 0, 1), ("g", "t", 2, 3), ("g", "u", 1, 0), ("h", "t", 1, 2)])
        assert b.group_offsets("g") == {("t", 0): 1, ("t", 2): 3, ("u", 1): 0}
        assert b.committed("h", "t", 1) == 2
    with FileBroker(tmp_path) as again:  # (read back from the files)
        assert again.group_offsets("g") == {("t", 0): 1, ("t", 2): 3, ("u", 1): 0}


def test_a_batch_the_disk_refuses_leaves_the_old_offsets_and_no_temporary_file(
    tmp_path: Path, faults: Callable[[str], None]
) -> None:
    with FileBroker(tmp_path) as b:
        b.create_topic("t", 3)
        for q in range(3):
            b.append("t", q, [(0, None, b"x", ())] * 3)
        b.commit_many([("g", "t", q, 1) for q in range(3)])
        faults("offset-commit:1:ENOSPC@1")  # the second file of the next batch
        with pytest.raises(OSError, match="No space left"):
            b.commit_many([("g", "t", q, 2) for q in range(3)])
        faults("")
        assert b.group_offsets("g") == {("t", 0): 1, ("t", 1): 1, ("t", 2): 1}
        assert not [p for p in (tmp_path / "groups").rglob(".*.tmp")]
        b.commit_many([("g", "t", q, 3) for q in range(3)])
        assert b.group_offsets("g") == {("t", 0): 3, ("t", 1): 3, ("t", 2): 3}
