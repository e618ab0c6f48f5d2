"""A short input goes over every queue of its source topic, not into one chunk on one
queue (on a real file log); what was read stays exactly once across a resume."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rstreams.runtime.engine.coordination.worker import open_broker
from rstreams.runtime.engine.io.ingest import (
    MIN_SPREAD_LINES,
    SAMPLE,
    Ingest,
    Input,
    estimate_lines,
    last_mark,
    lines_per_chunk,
    read_marks,
)
from rstreams.runtime.queues.broker import Broker

QUEUES = 8


@pytest.fixture
def broker(tmp_path: Path):
    b = open_broker(tmp_path / "job")
    b.create_topic("lines", QUEUES)
    yield b
    b.close()


def per_queue(broker: Broker) -> list[list[bytes | None]]:
    return [[r.value for r in broker.read("lines", q, 0)] for q in range(QUEUES)]


def ingest_all(broker: Broker, path: Path, chunk_lines: int = 20_000) -> Ingest:
    read = read_marks(broker, {"lines": str(path)})["lines"]
    ingest = Ingest(
        broker, "wc", [Input("lines", str(path), QUEUES, read)], chunk_lines=chunk_lines
    )
    while ingest.step():
        pass
    return ingest


def test_a_short_input_reaches_every_queue(tmp_path: Path, broker: Broker) -> None:
    path = tmp_path / "in.txt"
    lines = [f"line {i}".encode() for i in range(1_000)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    ingest = ingest_all(broker, path)
    got = per_queue(broker)
    assert [len(q) for q in got] == [125] * QUEUES  # 1,000 lines, 8 queues: 125 a chunk
    assert [line for q in got for line in q] == lines  # in order, each once
    assert ingest.counts()["records_in"] == 1_000
    mark = last_mark(broker, "lines", os.path.realpath(path))
    assert mark is not None and mark.position == path.stat().st_size


def test_spread_input_resumes_exactly_once(tmp_path: Path, broker: Broker) -> None:
    path = tmp_path / "in.txt"
    first = [f"a{i}".encode() for i in range(450)]
    path.write_bytes(b"\n".join(first) + b"\nlast without newline")
    ingest_all(broker, path)
    assert sum(map(len, per_queue(broker))) == 451
    with path.open("ab") as f:  # only its newline came, then more lines
        f.write(b"\n" + b"".join(f"b{i}\n".encode() for i in range(300)))
    again = ingest_all(broker, path)
    assert again.counts()["records_in"] == 300
    everything = sorted(v for q in per_queue(broker) for v in q if v is not None)
    expected = sorted([*first, b"last without newline", *(f"b{i}".encode() for i in range(300))])
    assert everything == expected  # nothing twice, nothing skipped
    assert ingest_all(broker, path).counts()["records_in"] == 0
    path.write_bytes(b"rewritten\n")
    with pytest.raises(Exception, match="changed since the job read it"):
        read_marks(broker, {"lines": str(path)})


def test_a_small_chunk_lines_is_kept(tmp_path: Path, broker: Broker) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"".join(b"x\n" for _ in range(40)))
    ingest_all(broker, path, chunk_lines=3)
    # 14 chunks of 3 (the last of 1) round-robin: chunk_lines stays the largest chunk.
    assert [len(q) for q in per_queue(broker)] == [6, 6, 6, 6, 6, 4, 3, 3]


def test_estimate_and_chunk_size(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    line = b"0123456789abcde\n"  # 16 bytes
    path.write_bytes(line * (SAMPLE // 16 * 4) + b"tail")
    size = path.stat().st_size
    with path.open("rb") as f:
        fd = f.fileno()
        assert estimate_lines(fd, 0, size) == size // 16  # from the sample
        assert estimate_lines(fd, size - 20, size) == 2  # counted: 16 bytes and "tail"
        assert estimate_lines(fd, size, size) == 0
    assert lines_per_chunk(0, 8, 20_000) == MIN_SPREAD_LINES
    assert lines_per_chunk(16_001, 8, 20_000) == 2_001
    assert lines_per_chunk(10**9, 1, 20_000) == 20_000
