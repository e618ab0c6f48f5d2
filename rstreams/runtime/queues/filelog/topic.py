"""A topic of the file log: its ``meta.json`` (checked by a crc) and its queue objects."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rstreams.runtime.queues._files import CorruptLogError, _atomic_write, _fsync_dir, _makedirs
from rstreams.runtime.queues.filelog.segment import segment_path

if TYPE_CHECKING:
    from rstreams.runtime.queues.filelog.queue import Queue


def _meta_crc(meta: dict[str, Any]) -> int:
    body = {k: v for k, v in meta.items() if k != "crc"}
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


class Topic:
    """A topic's options (from its ``meta.json``) and its queues, opened on first use."""

    __slots__ = (
        "compacted",
        "dir",
        "index_interval",
        "name",
        "queue_count",
        "queues",
        "retention_bytes",
        "retention_ms",
        "segment_bytes",
    )

    def __init__(self, name: str, path: Path, meta: dict[str, Any]) -> None:
        self.name = name
        self.dir = path
        self.queue_count: int = meta["queues"]
        self.compacted: bool = meta.get("compacted", False)
        self.retention_ms: int | None = meta.get("retention_ms")
        self.retention_bytes: int | None = meta.get("retention_bytes")
        self.segment_bytes: int = meta["segment_bytes"]
        self.index_interval: int = meta["index_interval_bytes"]
        self.queues: list[Queue | None] = [None] * self.queue_count

    @classmethod
    def create(cls, name: str, tdir: Path, options: dict[str, Any], *, sync: bool) -> Topic:
        """Write a new topic's directories, first segments and (last) ``meta.json``."""
        meta = {"format": 1, "name": name, **options}
        meta["crc"] = _meta_crc(meta)
        _makedirs(tdir, sync=sync)
        for i in range(meta["queues"]):
            qdir = tdir / str(i)
            qdir.mkdir(exist_ok=True)
            os.close(os.open(segment_path(qdir, 0), os.O_WRONLY | os.O_CREAT, 0o644))
            if sync:
                _fsync_dir(qdir)
        # meta.json last: its presence is what makes the topic exist
        data = json.dumps(meta, indent=2).encode() + b"\n"
        _atomic_write(tdir / "meta.json", data, sync=sync)
        return cls(name, tdir, meta)

    @classmethod
    def load(cls, name: str, tdir: Path, root: Path) -> Topic | None:
        """The topic in ``tdir``; None if it has no ``meta.json``, CorruptLogError if
        that is damaged."""
        try:
            data = (tdir / "meta.json").read_bytes()
        except FileNotFoundError:
            return None
        try:
            meta = json.loads(data)
            if isinstance(meta, dict) and "crc" in meta and meta["crc"] != _meta_crc(meta):
                raise ValueError("checksum mismatch")
            if not isinstance(meta, dict) or meta.get("name") != name:
                raise ValueError(
                    f"it names {meta.get('name') if isinstance(meta, dict) else meta!r}"
                )
            if not isinstance(meta.get("queues"), int) or meta["queues"] < 1:
                raise ValueError(f"queues {meta.get('queues')!r}")
            for k in ("segment_bytes", "index_interval_bytes"):
                if not isinstance(meta.get(k), int) or meta[k] < 1:
                    raise ValueError(f"{k} {meta.get(k)!r}")
        except (ValueError, UnicodeDecodeError) as e:
            raise CorruptLogError(
                name, None, str(tdir / "meta.json"), None,
                f"the topic's metadata file is damaged ({e})", root=root,
            ) from None  # fmt: skip
        return cls(name, tdir, meta)
