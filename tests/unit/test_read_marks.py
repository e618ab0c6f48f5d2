"""Read marks: the checksums a run keeps of what it read of an input equal those of the
bytes themselves, however the reads and chunks fall, and a resumed read continues them."""

from __future__ import annotations

import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.runtime.engine.io.ingest import BLOCK, ReadMark, Tap, what_changed
from rstreams.runtime.inputs import line_chunks


def _expected(data: bytes, pos: int) -> tuple[int, int, bool]:
    head = zlib.crc32(data[: min(pos, BLOCK)])
    tail = zlib.crc32(data[max(0, pos - BLOCK) : pos])
    return head, tail, pos == 0 or data[pos - 1 : pos] == b"\n"


lines = st.lists(st.binary(max_size=3000).map(lambda b: b.replace(b"\n", b"")), max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    lines=lines,
    partial=st.booleans(),
    chunk_lines=st.integers(1, 4),
    block=st.integers(1, 5000),
    resume_at=st.integers(0, 12),
)
def test_marks_match_the_bytes_read(
    tmp_path_factory, lines, partial, chunk_lines, block, resume_at
) -> None:
    data = b"".join(line + b"\n" for line in lines) + (b"tail" if partial else b"")
    path = tmp_path_factory.mktemp("f") / "in.txt"
    path.write_bytes(data)

    def read(start: int, before: ReadMark | None, stop_after: int = -1) -> list[ReadMark]:
        marks = []
        with path.open("rb") as f:
            tap = Tap(f, "in.txt", start, before)
            for n, (_, consumed) in enumerate(line_chunks(tap, chunk_lines, block=block)):
                marks.append(tap.mark(start + consumed))
                if n == stop_after:
                    break
        return marks

    marks = read(0, None, resume_at)
    if marks:  # a later run resumes from the last mark
        marks += read(marks[-1].position, marks[-1])
    assert not marks or marks[-1].position == len(data)
    for mark in marks:
        assert (mark.head, mark.tail, mark.newline) == _expected(data, mark.position)
        assert ReadMark.decode(mark.encode()) == mark
        assert what_changed(str(path), mark) is None


def test_a_mark_of_an_earlier_version_checks_the_length_only(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"other content\n")
    mark = ReadMark.decode(f"{path}@10".encode())
    assert mark == ReadMark(str(path), 10)
    assert what_changed(str(path), mark) is None
    path.write_bytes(b"short\n")
    assert what_changed(str(path), mark) == (
        "it is 6 bytes long now, shorter than the 10 bytes the job read"
    )
