"""Reading the inputs of a bounded run, the same on every backend: checking that every
source topic is bound to an input, opening input files and cutting them into chunks of
lines.

It sits below both backends (the embedded engine and Spark) and :mod:`rstreams.runner`,
which re-exports its public names.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from rstreams.errors import ConfigError

if TYPE_CHECKING:
    from rstreams.planner.topology import Topology

__all__ = ["check_inputs", "line_chunks", "open_input"]


class _Reader(Protocol):
    def read(self, n: int, /) -> bytes: ...


def line_chunks(
    f: _Reader, chunk_lines: int, *, last_partial: bool = True, block: int = 1 << 20
) -> Iterator[tuple[list[bytes], int]]:
    """Chunks of ``chunk_lines`` lines (without their line ends: ``\n`` and any ``\r``
    before it) and the bytes consumed so far.

    The file is read in large blocks and split in C, not a line at a time. A last line
    without a newline is a chunk of its own, kept as it is, when ``last_partial``
    (a finished file); otherwise it is left unread (a file still being written).
    """
    consumed = 0
    rest = b""
    pending: list[bytes] = []
    cr = False  # seen a \r: strip it from line ends

    def take(n: int) -> tuple[list[bytes], int]:
        chunk = pending[:n]
        del pending[:n]
        size = sum(map(len, chunk)) + len(chunk)  # the lines and their newlines
        if cr:
            chunk = [line.rstrip(b"\r") for line in chunk]
        return chunk, size

    while data := f.read(block):
        if rest:
            data = rest + data
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data
            continue
        rest = data[cut + 1 :]
        body = data[:cut]
        cr = cr or b"\r" in body
        pending.extend(body.split(b"\n"))
        while len(pending) >= chunk_lines:
            chunk, size = take(chunk_lines)
            consumed += size
            yield chunk, consumed
    if pending:
        chunk, size = take(len(pending))
        consumed += size
        yield chunk, consumed
    if rest and last_partial:
        consumed += len(rest)
        yield [rest], consumed


def open_input(path: str) -> tuple[BinaryIO, int | None]:
    if path == "-":
        return sys.stdin.buffer, None
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"input file {path!r} does not exist")
    if p.is_dir():
        raise ConfigError(f"input {path!r} is a directory; give a file (one record per line)")
    try:
        f = p.open("rb")
    except OSError as e:
        raise ConfigError(f"can not read input file {path!r}: {e.strerror}") from None
    return f, p.stat().st_size


def check_inputs(topology: Topology, inputs: dict[str, str]) -> None:
    """Every source topic bound to an input, and nothing else bound."""
    missing = [t for t in topology.source_topics if t not in inputs]
    unknown = [t for t in inputs if t not in topology.source_topics]
    if unknown:
        raise ConfigError(
            f"topic(s) {unknown} are not sources of {topology.job_id!r}; "
            f"its sources are {topology.source_topics}"
        )
    if missing:
        raise ConfigError(f"no input bound to source topic(s) {missing}; bind each to a file")
