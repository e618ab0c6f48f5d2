"""Read a job's state stores from outside the job (CLI, notebooks).

State is read from the stores' changelog topics (latest value per key, tombstones
delete), which is exactly what a restore rebuilds, and works while the job runs (a
running worker holds its RocksDB databases open).

    >>> # after `rstreams run examples/wordcount.py --input corpus.txt`:
    >>> # from rstreams.state.inspect import load_store
    >>> # load_store(".rstreams", "wordcount", "wordcount-sentences-count-3-store")["the"]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rstreams.errors import ConfigError
from rstreams.runtime.layout import JobLayout
from rstreams.runtime.queues.broker import Broker
from rstreams.serde import INTERNAL_SERDE, Serde
from rstreams.state.stores import STREAM_TIME_KEY


def _broker(data_dir: str | Path, job: str, broker: Broker | None = None) -> Any:
    """The job's file log, or ``broker`` (left open: its owner closes it)."""
    if broker is not None:
        return contextlib.nullcontext(broker)
    from rstreams.runtime.queues.filelog import FileBroker

    root = JobLayout.of(data_dir, job).log
    if not root.is_dir():
        raise ConfigError(f"no job {job!r} in {data_dir} (no {root})")
    return FileBroker(root)


def changelog_of(store: str) -> str:
    if not store.endswith("-store"):
        raise ConfigError(f"{store!r} is not a store name (they end in -store)")
    return store[: -len("-store")] + "-changelog"


def list_stores(data_dir: str | Path, job: str, *, broker: Broker | None = None) -> dict[str, int]:
    """Store names of a job with their queue counts (in its file log under ``data_dir``,
    or in ``broker``, e.g. the job's Redis broker)."""
    with _broker(data_dir, job, broker) as b:
        return {
            t[: -len("-changelog")] + "-store": n
            for t, n in sorted(b.topics().items())
            if t.endswith("-changelog")
        }


def iter_store(
    data_dir: str | Path,
    job: str,
    store: str,
    *,
    queue: int | None = None,
    serde: Serde = INTERNAL_SERDE,
    internal: bool = False,
    broker: Broker | None = None,
) -> Iterator[tuple[int, Any, Any]]:
    """(queue, key, value) of every live key of ``store`` (all queues, or one), read
    from the job's file log under ``data_dir``, or from ``broker`` if given.

    The runtime's own entries (the stream time a windowed step keeps beside its
    windows) are left out unless ``internal``."""
    topic = changelog_of(store)
    with _broker(data_dir, job, broker) as b:
        n = b.queue_count(topic)
        if n is None:
            raise ConfigError(f"job {job!r} has no store {store!r}")
        for q in range(n) if queue is None else [queue]:
            latest: dict[bytes, bytes | None] = {}
            pos = b.start_offset(topic, q)
            while True:
                records = b.read(topic, q, pos, 50_000)
                if not records:
                    break
                for r in records:
                    if r.key is not None:
                        latest[r.key] = r.value
                pos = records[-1].offset + 1
            for k, v in latest.items():
                if v is None:
                    continue
                key = INTERNAL_SERDE.deserialize(k)
                if internal or key != STREAM_TIME_KEY:
                    yield q, key, serde.deserialize(v)


def load_store(data_dir: str | Path, job: str, store: str, **kwargs: Any) -> dict[Any, Any]:
    """The current content of ``store`` as a dict (keys of all queues)."""
    return {k: v for _, k, v in iter_store(data_dir, job, store, **kwargs)}


def load_store_frame(data_dir: str | Path, job: str, store: str, **kwargs: Any) -> Any:
    """The current content of ``store`` as a pandas DataFrame (queue, key, value)."""
    import pandas as pd

    rows = list(iter_store(data_dir, job, store, **kwargs))
    return pd.DataFrame(rows, columns=["queue", "key", "value"])
