"""Helpers for the tests of the file log's parts (test_filelog_*.py): a queue on real
files, opened without a broker."""

from __future__ import annotations

from pathlib import Path

from rstreams.runtime.queues._logformat import encode_batch
from rstreams.runtime.queues.filelog.queue import Queue
from rstreams.runtime.queues.filelog.topic import Topic


def open_queue(root: Path, fsync: str = "commit", **options: object) -> Queue:
    """Queue 0 of topic ``t`` under ``root`` (the topic created on first use, with
    ``options`` over small segments and a dense index), opened and recovered."""
    topic = Topic.load("t", root / "t", root)
    if topic is None:
        meta = {
            "queues": 1,
            "compacted": False,
            "retention_ms": None,
            "retention_bytes": None,
            "segment_bytes": 1 << 20,
            "index_interval_bytes": 64,
            **options,
        }
        topic = Topic.create("t", root / "t", meta, sync=False)
    q = Queue(topic, 0, fsync, lambda q: None)
    q.open([])
    return q


def append(q: Queue, *values: bytes | None, ts: int = 0, key: bytes | None = None) -> int:
    """Append one record per value as one frame; the first offset."""
    batch = encode_batch([(ts, key, v, ()) for v in values])
    assert batch is not None
    return q.append(*batch)


def values(q: Queue, offset: int = 0) -> list[bytes | None]:
    """The values of every record from ``offset`` on."""
    return list(q.reader.read_columns(offset, None).values)
