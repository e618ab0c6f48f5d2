"""The small state files of a queue: its durable point and its start offset.

``durable-point`` holds ``"<segment base> <bytes> <end offset> <crc32>"``: how far the
queue is known whole (and synced, unless ``fsync="never"``). ``start-offset`` holds
``"<offset> <crc32>"``: the logical start after purges and retention.
"""

from __future__ import annotations

import zlib

DURABLE_FILE = "durable-point"  # "<segment base> <bytes> <end offset> <crc32>"
START_FILE = "start-offset"  # "<offset> <crc32>"


def parse_durable(text: str) -> tuple[int, int, int]:
    """(segment base, bytes, end offset) of a durable-point file; ValueError if damaged."""
    seg, size, end, crc = (int(x) for x in text.split())
    if zlib.crc32(f"{seg} {size} {end}".encode()) != crc or min(seg, size, end) < 0:
        raise ValueError("checksum mismatch")
    return seg, size, end


def format_durable(seg: int, size: int, end: int) -> bytes:
    """The contents of a durable-point file (see :func:`parse_durable`)."""
    text = f"{seg} {size} {end}"
    return f"{text} {zlib.crc32(text.encode())}\n".encode()


def below_durable(mark: tuple[int, int, int] | None, base: int, pos: int) -> bool:
    """Whether byte ``pos`` of segment ``base`` lies below the durable point ``mark``
    (so a bad frame there is damage, not a torn write)."""
    return mark is not None and (mark[0] > base or (mark[0] == base and pos < mark[1]))


def parse_start(text: str) -> int:
    """The offset in a start-offset file: ``"<offset> <crc32>"``, or a bare offset as
    written before the crc; ValueError if damaged."""
    parts = [int(x) for x in text.split()]
    if len(parts) == 2 and zlib.crc32(str(parts[0]).encode()) != parts[1]:
        raise ValueError("checksum mismatch")
    if len(parts) not in (1, 2) or parts[0] < 0:
        raise ValueError(f"{text.strip()!r}")
    return parts[0]


def format_start(start: int) -> bytes:
    """The contents of a start-offset file (see :func:`parse_start`)."""
    return f"{start} {zlib.crc32(str(start).encode())}\n".encode()
