"""Input lines longer than a read block: gathered once (not copied per block), and
limited by ``max_line_bytes`` with an error naming the file and the byte."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from rstreams.errors import InputLineTooLongError
from rstreams.runtime.inputs import line_chunks

ROOT = Path(__file__).resolve().parents[2]


class _CountingReader(io.BytesIO):
    """Counts the blocks read: a line of N blocks must be read in N reads, and the
    bytes handed out must add up to the file (nothing read twice)."""

    reads = 0

    def read(self, n: int | None = -1, /) -> bytes:
        self.reads += 1
        return super().read(n)


def _lines(data: bytes, **kwargs: object) -> list[bytes]:
    return [line for chunk, _ in line_chunks(io.BytesIO(data), 3, **kwargs) for line in chunk]  # type: ignore[arg-type]


@pytest.mark.parametrize("block", [1, 2, 7, 64, 1 << 20])
def test_lines_spanning_blocks_come_out_whole(block: int) -> None:
    long = b"y" * 1000
    data = b"a\r\n" + long + b"\r\nbb\n" + long + long + b"\nlast"
    assert _lines(data, block=block) == [b"a", long, b"bb", long + long, b"last"]
    chunks = list(line_chunks(io.BytesIO(data), 2, block=block))
    assert chunks[-1][1] == len(data)  # the bytes consumed reach the end


def test_a_30_mb_line_is_read_whole_block_by_block() -> None:
    line = b"z" * (30 << 20)
    reader = _CountingReader(b"x\n" + line + b"\nw\n")
    got = [x for chunk, _ in line_chunks(reader, 10, block=1 << 20) for x in chunk]
    assert got == [b"x", line, b"w"]
    assert reader.reads == 31 + 1  # every block once, then the empty read at the end


@pytest.mark.parametrize("block", [4, 1 << 20])
def test_a_line_over_the_limit_names_the_file_and_byte(block: int) -> None:
    data = b"ok\n" + b"q" * 50 + b"\nmore\n"
    with pytest.raises(InputLineTooLongError) as e:
        _lines(data, block=block, max_line=20, name="in.txt", start=100)
    assert "input 'in.txt': the line at byte 103 is longer than 20 bytes" in str(e.value)
    assert "--max-line-bytes" in str(e.value)
    assert _lines(data, block=block, max_line=50) == [b"ok", b"q" * 50, b"more"]


@pytest.mark.parametrize("block", [4, 1 << 20])
def test_the_first_line_over_the_limit_is_named_with_its_size(block: int) -> None:
    data = b"ok\n" + b"a" * 30 + b"\n" + b"b" * 50 + b"\n"
    with pytest.raises(InputLineTooLongError) as e:
        _lines(data, block=block, max_line=20, name="in.txt")
    assert "the line at byte 3 is longer than 20 bytes (--max-line-bytes): " in str(e.value)
    # its whole length when the block held it whole, else what was read of it so far
    assert ("it has 30 bytes" if block > 30 else "bytes of it read so far") in str(e.value)


@pytest.mark.parametrize("block", [4, 1 << 20])
@pytest.mark.parametrize("last_partial", [True, False], ids=["bounded", "followed"])
def test_a_last_line_without_newline_over_the_limit_fails_too(
    block: int, last_partial: bool
) -> None:
    """Also when the limit is below a block, and before the line's newline is written."""
    data = b"ok\n" + b"q" * 50
    with pytest.raises(InputLineTooLongError, match="the line at byte 3 is longer than 20"):
        _lines(data, block=block, max_line=20, last_partial=last_partial)


@pytest.mark.parametrize(
    "runtime", [["--in-memory"], ["--workers", "1"]], ids=["memory", "workers"]
)
def test_the_cli_stops_on_a_line_over_max_line_bytes(tmp_path: Path, runtime: list[str]) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes(b"a b\n" + b"x" * 3000 + b"\nc\n")
    run = [sys.executable, "-m", "rstreams", "run", str(ROOT / "examples" / "wordcount.py"),
           "--input", str(src), "--data-dir", str(tmp_path / "d"), *runtime]  # fmt: skip
    r = subprocess.run([*run, "--max-line-bytes", "1000"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert f"input '{src}': the line at byte 4 is longer than 1,000 bytes" in r.stderr
    assert "Traceback" not in r.stderr
    ok = subprocess.run([*run, "--max-line-bytes", "3000", "--output", "-", "-q"],
                        capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert len(ok.stdout.splitlines()) == 4  # a, b, c and the long word
