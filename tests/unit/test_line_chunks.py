"""Reading input files in blocks gives the lines and positions a line-at-a-time read gives."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.runner import line_chunks


def _reference(data: bytes, chunk_lines: int, last_partial: bool) -> list[tuple[list[bytes], int]]:
    """Line at a time: what rstreams did before reading in blocks."""
    out: list[tuple[list[bytes], int]] = []
    chunk: list[bytes] = []
    pos = 0
    for raw in io.BytesIO(data):
        if not raw.endswith(b"\n"):
            if chunk:
                out.append((chunk, pos))
                chunk = []
            if last_partial:
                out.append(([raw], pos + len(raw)))
            return out
        pos += len(raw)
        chunk.append(raw.rstrip(b"\r\n"))
        if len(chunk) >= chunk_lines:
            out.append((chunk, pos))
            chunk = []
    if chunk:
        out.append((chunk, pos))
    return out


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r", b"\r\n", b" ", b"\xc3\xa9"])).map(
        b"".join
    ),
    chunk_lines=st.integers(1, 5),
    block=st.integers(1, 9),
    last_partial=st.booleans(),
)
def test_block_reads_equal_line_reads(data, chunk_lines, block, last_partial) -> None:
    got = list(line_chunks(io.BytesIO(data), chunk_lines, last_partial=last_partial, block=block))
    assert got == _reference(data, chunk_lines, last_partial)


def test_positions_allow_resuming_mid_file() -> None:
    data = b"one\r\ntwo\n\nthree\nfour"
    chunks = list(line_chunks(io.BytesIO(data), 2, last_partial=False))
    assert chunks == [([b"one", b"two"], 9), ([b"", b"three"], 16)]
    # What follows the last position is what a follower reads next.
    assert data[16:] == b"four"
