"""Committed consumer-group offsets, kept apart from the records they point into.

:class:`FileGroupOffsets` is the file log's store (one small checked file per group,
topic and queue); :class:`MemoryGroupOffsets` the in-memory broker's. Neither knows of
records: the broker makes appended data durable before it commits (see
:meth:`~rstreams.runtime.queues.broker.Broker.commit`).

>>> import tempfile
>>> from pathlib import Path
>>> with tempfile.TemporaryDirectory() as root:
...     o = FileGroupOffsets(Path(root) / "groups", sync=False)
...     o.commit("g", "t", 1, 7)
...     o.committed("g", "t", 1), o.committed("g", "t", 0), o.groups(), o.group_offsets("g")
(7, 0, ['g'], {('t', 1): 7})
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from rstreams.errors import ConfigError
from rstreams.runtime.queues._files import (
    CorruptLogError,
    _atomic_write,
    _atomic_write_many,
    _encode_name,
    _makedirs,
)

__all__ = ["FileGroupOffsets", "MemoryGroupOffsets"]


def _offset_crc(doc: dict[str, Any]) -> int:
    text = f"{doc['group']}\0{doc['topic']}\0{doc['queue']}\0{doc['offset']}"
    return zlib.crc32(text.encode())


def check_name(name: str) -> None:
    """Refuse a topic or group name that is not a non-empty string (as every broker does)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"names must be non-empty strings; got {name!r}")


def check_offset(group: str, topic: str, queue: int, offset: int) -> None:
    """Refuse a negative committed offset: no read could ever start there."""
    if offset < 0:
        raise ConfigError(
            f"group {group!r} cannot commit offset {offset} of {topic!r}[{queue}]: offsets are >= 0"
        )


def check_commit(group: str, topic: str, queue: int, offset: int) -> None:
    """The checks of a commit on every broker: names, and an offset >= 0."""
    check_name(group)
    check_name(topic)
    check_offset(group, topic, queue, offset)


class MemoryGroupOffsets:
    """Committed offsets in a dict."""

    def __init__(self) -> None:
        self._offsets: dict[tuple[str, str, int], int] = {}

    def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        self.commit_many([(group, topic, queue, offset)])

    def commit_many(self, commits: Sequence[tuple[str, str, int, int]]) -> None:
        for commit in commits:  # (all checked before any is recorded)
            check_commit(*commit)
        for group, topic, queue, offset in commits:
            self._offsets[(group, topic, queue)] = offset

    def committed(self, group: str, topic: str, queue: int) -> int:
        return self._offsets.get((group, topic, queue), 0)

    def groups(self) -> list[str]:
        return sorted({g for g, _, _ in self._offsets})

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        return {(t, q): o for (g, t, q), o in sorted(self._offsets.items()) if g == group}


class FileGroupOffsets:
    """Committed offsets as files ``<dir>/<group>/<topic>/<queue>.json``.

    Each holds ``{"group", "topic", "queue", "offset", "crc"}`` (names percent-encoded
    in paths when not plain, the real ones in the file); it is written to a temporary
    file and renamed into place (synced when ``sync``), so a crash never leaves half an
    offset, and processes committing different queues never overwrite each other. A
    damaged file is a :class:`~rstreams.runtime.queues.filelog.CorruptLogError`, never
    offset 0.
    """

    def __init__(self, directory: Path, *, sync: bool) -> None:
        self.dir = directory
        self._sync = sync
        _makedirs(self.dir, sync=sync)

    def path(self, group: str, topic: str, queue: int) -> Path:
        return self.dir / _encode_name(group) / _encode_name(topic) / f"{int(queue)}.json"

    def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        self.commit_many([(group, topic, queue, offset)])

    def commit_many(self, commits: Sequence[tuple[str, str, int, int]]) -> None:
        """Commit each (group, topic, queue, offset): the files are written, then synced
        together (see ``_atomic_write_many``); all are durable when this returns."""
        files: dict[Path, bytes] = {}  # (a queue committed twice: its last offset)
        for group, topic, queue, offset in commits:
            check_offset(group, topic, queue, offset)
            path = self.path(group, topic, queue)
            _makedirs(path.parent, sync=self._sync)
            doc: dict[str, Any] = {
                "group": group,
                "topic": topic,
                "queue": queue,
                "offset": int(offset),
            }
            doc["crc"] = _offset_crc(doc)
            files[path] = json.dumps(doc).encode() + b"\n"
        if len(files) == 1:
            ((path, data),) = files.items()
            _atomic_write(path, data, sync=self._sync, point="offset-commit")
        else:
            _atomic_write_many(list(files.items()), sync=self._sync, point="offset-commit")

    def committed(self, group: str, topic: str, queue: int) -> int:
        """The offset ``group`` committed for the queue (0 if none)."""
        try:
            return int(self.read_file(self.path(group, topic, queue))["offset"])
        except FileNotFoundError:
            return 0

    def read_file(self, path: Path) -> dict[str, Any]:
        """A committed-offset file, checked: a damaged one is an error, never offset 0."""
        data = path.read_bytes()
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or not isinstance(doc.get("offset"), int):
                raise ValueError("no offset")
            if "crc" in doc and doc["crc"] != _offset_crc(doc):
                raise ValueError("checksum mismatch")
            if doc["offset"] < 0 or not isinstance(doc.get("queue"), int):
                raise ValueError(f"offset {doc['offset']}, queue {doc.get('queue')!r}")
        except (ValueError, UnicodeDecodeError) as e:
            raise CorruptLogError(
                unquote(path.parent.name), int(path.stem) if path.stem.isdigit() else None,
                str(path), None,
                f"the committed-offset file of group {unquote(path.parent.parent.name)!r} is "
                f"damaged ({e})",
                root=self.dir.parent,
            ) from None  # fmt: skip
        return doc

    def groups(self) -> list[str]:
        """Every group with committed offsets."""
        return sorted(
            unquote(d.name) for d in self.dir.iterdir() if d.is_dir() and not d.name.startswith(".")
        )

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """{(topic, queue): offset} of everything ``group`` committed."""
        out = {}
        gdir = self.dir / _encode_name(group)
        if not gdir.is_dir():
            return {}
        for f in sorted(gdir.glob("*/*.json")):
            if f.name.startswith("."):
                continue
            doc = self.read_file(f)
            out[(doc["topic"], int(doc["queue"]))] = int(doc["offset"])
        return out

    def committed_by(self, topic: str, queue: int) -> Iterator[tuple[str, int]]:
        """(group, committed offset) of every group that committed this queue."""
        tname = _encode_name(topic)
        for gdir in sorted(self.dir.iterdir()):
            path = gdir / tname / f"{queue}.json"
            if not gdir.name.startswith(".") and path.exists():
                doc = self.read_file(path)
                yield doc["group"], doc["offset"]
