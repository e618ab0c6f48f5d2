"""What a bounded run produced, the same on every backend: :class:`RunResult`, the
:class:`Progress` snapshots passed to a progress callback, folding sink records into final
tables and writing those tables as JSON lines.

It sits below both backends (the embedded engine and Spark) and :mod:`rstreams.runner`,
which re-exports its public names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

import attrs

from rstreams.runtime.queues.base import RecordColumns
from rstreams.serde import _json_default, json_texts

__all__ = ["Progress", "RunResult", "fold_records", "write_table"]


@attrs.frozen
class Progress:
    """A snapshot passed to the ``progress`` callback of :func:`rstreams.run`."""

    records_in: int
    records_out: int
    bytes_read: int
    bytes_total: int | None
    elapsed: float
    #: What is running, when the backend says more than counts (e.g. a Spark stage).
    detail: str = ""
    #: Records read but not yet committed (durable runtime only).
    lag: int | None = None
    #: (changelog offsets replayed, offsets to replay) of the tasks restoring their
    #: state now (durable runtime only).
    restoring: tuple[int, int] | None = None
    #: Worker processes alive now (durable runtime only).
    workers: int | None = None


@attrs.frozen
class RunResult:
    """What a bounded run produced.

    ``tables`` maps each sink topic to its final table (last value per key). The order
    of a table's keys is not specified: it follows the sink topic's queues and commits,
    not the input, and may differ between backends and runs; sort it to compare.
    ``records_in`` counts input lines, ``records_out`` records written to sink topics.
    ``stale`` names the stores and sink topics that keep what an earlier version of the
    pipeline computed: a resumed job (``data_dir``) whose pipeline changed before them
    does not read the input it already consumed again (``fresh=True`` recomputes).
    """

    tables: dict[str, dict[Any, Any]]
    records_in: int
    records_out: int
    elapsed: float
    metrics: dict[str, int]
    stale: tuple[str, ...] = ()


def fold_records(table: dict[Any, Any], records: RecordColumns, spec: Any) -> None:
    """Fold sink records (deserialized with the sink topic's serdes) into a final table:
    the last value per key."""
    if not len(records):
        return
    # Only each key's last record counts: pick those on the raw bytes (in log order, so
    # that keys written as different bytes still fold in order), then decode columns.
    raw_keys, raw_values = records.keys, records.values
    last = sorted(dict(zip(raw_keys, range(len(raw_keys)))).values())
    keys = _decode_column(spec.key_serde, [raw_keys[i] for i in last])
    values = _decode_column(spec.value_serde, [raw_values[i] for i in last])
    try:
        table.update(zip(keys, values))
    except TypeError:  # unhashable keys (lists, dicts): make them hashable
        for k, v in zip(keys, values):
            table[_hashable(k)] = v


def _decode_column(serde: Any, column: list[bytes | None]) -> list[Any]:
    if None in column:
        de = serde.deserialize
        return [None if b is None else de(b) for b in column]
    return serde.deserialize_many(column)


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in key.items()))
    return key


def _table_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=_json_default)


def _rows(table: dict[Any, Any]) -> list[str]:
    """The JSON lines of a final table (windowed keys as {"@windowed": [...]})."""
    keys = json_texts(list(table), _table_json)
    values = json_texts(list(table.values()), _table_json)
    return [f'{{"key": {k}, "value": {v}}}\n' for k, v in zip(keys, values)]


def write_table(table: dict[Any, Any], path: str | IO[str]) -> None:
    """Write a final table as JSON lines ``{"key": ..., "value": ...}``: to a file
    atomically (a temp file renamed into place), or to an open text stream."""

    if not isinstance(path, str):
        path.writelines(_rows(table))
        path.flush()
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(_rows(table))
    tmp.replace(target)
