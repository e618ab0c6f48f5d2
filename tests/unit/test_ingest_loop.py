"""Ingest: input files appended to their source topics in chunks of whole lines,
round-robin over the queues, each chunk marked with what was read (on a real file log)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rstreams.errors import ConfigError
from rstreams.runtime.engine.coordination.worker import open_broker
from rstreams.runtime.engine.io.ingest import Ingest, Input, last_mark, read_marks
from rstreams.runtime.engine.operators.watermarks import ingest_group
from rstreams.runtime.queues.broker import Broker


@pytest.fixture
def broker(tmp_path: Path):
    b = open_broker(tmp_path / "job")
    b.create_topic("lines", 2)
    yield b
    b.close()


def values(broker: Broker, q: int) -> list[bytes | None]:
    return [r.value for r in broker.read("lines", q, 0)]


def test_chunks_go_round_robin_and_the_end_is_recorded(tmp_path: Path, broker: Broker) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\nb\nc\nd\ne")  # a last line without its newline: a bounded file
    (inp,) = inputs = [Input("lines", str(path), 2, None)]
    ingest = Ingest(broker, "wc", inputs, chunk_lines=2)
    assert not ingest.done
    while ingest.step():
        pass
    assert ingest.done
    assert values(broker, 0) == [b"a", b"b", b"e"] and values(broker, 1) == [b"c", b"d"]
    assert ingest.counts() == {"records_in": 5, "bytes_read": 9, "bytes_total": 9}
    mark = last_mark(broker, "lines", os.path.realpath(path))
    assert mark == inp.mark and mark is not None and mark.position == 9 and not mark.newline
    # Where each queue ends, for the watermarks: committed under the ingest's group.
    assert [broker.committed(ingest_group("wc"), "lines", q) for q in (0, 1)] == [3, 2]
    assert read_marks(broker, {"lines": str(path)}) == {"lines": mark}


def test_a_run_resumes_after_what_was_read_and_refuses_a_changed_file(
    tmp_path: Path, broker: Broker
) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\nb\n")
    ingest = Ingest(broker, "wc", [Input("lines", str(path), 2, None)], chunk_lines=10)
    while ingest.step():
        pass
    with path.open("ab") as f:
        f.write(b"c\n")  # grew: read on
    read = read_marks(broker, {"lines": str(path)})
    again = Ingest(broker, "wc", [Input("lines", str(path), 2, read["lines"])], chunk_lines=10)
    while again.step():
        pass
    assert again.counts()["records_in"] == 1
    assert values(broker, 0) + values(broker, 1) == [b"a", b"b", b"c"]
    path.write_bytes(b"x\ny\nz\n")  # rewritten: refused
    with pytest.raises(ConfigError, match="changed since the job read it"):
        read_marks(broker, {"lines": str(path)})


def test_following_a_file_looks_for_lines_appended_since(tmp_path: Path, broker: Broker) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\nb")  # "b" is still being written: left for later
    ingest = Ingest(broker, "wc", [Input("lines", str(path), 2, None)], chunk_lines=10, follow=True)
    while ingest.step():
        pass
    assert ingest.done and ingest.counts()["records_in"] == 1
    with path.open("ab") as f:
        f.write(b"ee\n")
    ingest.look_again()
    while ingest.step():
        pass
    assert values(broker, 0) + values(broker, 1) == [b"a", b"bee"]
    path.write_bytes(b"")  # truncated while followed: the run stops
    with pytest.raises(ConfigError, match="shorter than"):
        for _ in range(1000):  # (it looks every half second)
            ingest.look_again()
            ingest.step()
            time.sleep(0.01)
