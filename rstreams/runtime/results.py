"""What a bounded run produced, the same on every backend: :class:`RunResult`, the
:class:`Progress` snapshots passed to a progress callback, folding sink records into final
tables and writing those tables as JSON lines.

It sits below both backends (the embedded engine and Spark) and :mod:`rstreams.runner`,
which re-exports its public names.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import IO, Any

import attrs
import msgspec

from rstreams.errors import ConfigError, RStreamsError
from rstreams.runtime.queues.base import RecordColumns
from rstreams.serde import fast_json, json_texts
from rstreams.windowed import Windowed, result_row

__all__ = [
    "Progress",
    "RunResult",
    "check_data_dir",
    "check_output_path",
    "fold_records",
    "letter_fields",
    "letter_text",
    "row_json",
    "table_lines",
    "write_dead_letters",
    "write_table",
]


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

    ``tables`` maps each sink topic to its final table (last value per key); a windowed
    aggregation's table is keyed by :class:`~rstreams.windowed.Windowed` (``.key``,
    ``.window.start``, ``.window.end``, ``.closed``), and :meth:`rows` gives any table
    in the flat shape ``--output`` writes. The order
    of a table's keys is not specified: it follows the sink topic's queues and commits,
    not the input, and may differ between backends and runs; sort it to compare.
    ``records_in`` counts this run's input lines, ``records_out`` the records it wrote
    to sink topics; ``resumed``, the input records a resumed job had taken in before
    (its table holds the results of every run).
    ``stale`` names the stores and sink topics that keep what an earlier version of the
    pipeline computed: a resumed job (``data_dir``) whose pipeline changed before them
    does not read the input it already consumed again (``fresh=True`` recomputes).
    ``dead_letters`` holds the records that failed under ``on_error="dead-letter"`` in a
    run that keeps no log (in process, or on Spark), as dicts with ``step``, ``topic``,
    ``queue``, ``offset``, ``key``, ``value`` and ``error``; the durable runtime keeps
    them in the topic ``<job>-dead-letter`` of the job's log instead.
    """

    tables: dict[str, dict[Any, Any]]
    records_in: int
    records_out: int
    elapsed: float
    metrics: dict[str, int]
    stale: tuple[str, ...] = ()
    dead_letters: list[dict[str, Any]] = attrs.field(factory=list)
    #: Input records a resumed job (``data_dir``) had taken in before this run (0: none).
    resumed: int = 0

    def rows(self, topic: str) -> list[dict[str, Any]]:
        """The final table of sink ``topic`` as :func:`~rstreams.windowed.result_row`
        dicts (``{"key", "value"}``, plus ``"window"`` and ``"closed"`` for windowed
        results), the rows ``rstreams run --output`` writes.

        >>> from rstreams.windowed import Windowed
        >>> r = RunResult({"counts": {Windowed("gus", 0, 60000): 3}}, 1, 1, 0.0, {})
        >>> r.rows("counts")
        [{'key': 'gus', 'window': {'start': 0, 'end': 60000}, 'value': 3}]
        """
        try:
            table = self.tables[topic]
        except KeyError:
            raise KeyError(
                f"no sink topic {topic!r} in this run; its sinks are {sorted(self.tables)}"
            ) from None
        return [result_row(k, v) for k, v in table.items()]


def letter_fields(name: str, value: Any, limit: int | None = None) -> dict[str, Any]:
    """How a dead letter holds a record's ``key`` or ``value`` (field ``name``), the same
    on every backend: the value itself where JSON holds it (text, numbers, booleans,
    null, lists and objects of them), so tools read it back as it was; bytes (a record
    that failed in its deserialization) as UTF-8 text, or base64 with
    ``"<name>_encoding": "base64"``; anything else as its ``repr()`` with
    ``"<name>_encoding": "repr"``. ``limit``: the longest JSON text kept whole (longer:
    its repr, cut).

    >>> letter_fields("value", {"ts": 1, "page": "/a"}), letter_fields("key", None)
    ({'value': {'ts': 1, 'page': '/a'}}, {'key': None})
    >>> letter_fields("value", b"caf\\xe9")
    {'value': 'Y2Fm6Q==', 'value_encoding': 'base64'}
    >>> letter_fields("value", {1, 2})
    {'value': '{1, 2}', 'value_encoding': 'repr'}
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return {name: raw.decode("utf-8")}
        except UnicodeDecodeError:
            return {name: base64.b64encode(raw).decode("ascii"), f"{name}_encoding": "base64"}
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        text = None
    if text is not None and (limit is None or len(text) <= limit):
        return {name: value}
    shown = repr(value)
    if limit is not None and len(shown) > limit:
        shown = shown[: limit - 3] + "..."
    return {name: shown, f"{name}_encoding": "repr"}


def letter_text(letter: dict[str, Any], name: str) -> str:
    """The ``key`` or ``value`` of a dead letter (see :func:`letter_fields`) as error
    messages show it: as the ``repr()`` of what the step had.

    >>> letter_text({"value": "bad"}, "value")
    "'bad'"
    >>> letter_text({"key": "{1}", "key_encoding": "repr"}, "key")
    '{1}'
    """
    value = letter.get(name)
    encoding = letter.get(f"{name}_encoding")
    if encoding == "repr":
        return str(value)
    if encoding == "base64":
        return repr(base64.b64decode(str(value)))
    return repr(value)


def fold_records(table: dict[Any, Any], records: RecordColumns, spec: Any) -> None:
    """Fold sink records (deserialized with the sink topic's serdes) into a final table:
    the last value per key; a last value of None (a tombstone: a session merged into
    another) deletes the key, so the table does not depend on which sessions merged
    in which order."""
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
        keys = [hashable_key(k) for k in keys]
        table.update(zip(keys, values))
    if None in values:
        for k, v in zip(keys, values):
            if v is None:
                table.pop(k, None)


def _decode_column(serde: Any, column: list[bytes | None]) -> list[Any]:
    if None in column:
        de = serde.deserialize
        return [None if b is None else de(b) for b in column]
    return serde.deserialize_many(column)


def hashable_key(key: Any) -> Any:
    """A key as a final table holds it: JSON lists and objects made hashable (tuples)."""
    if isinstance(key, list):
        return tuple(hashable_key(k) for k in key)
    if isinstance(key, dict):
        return tuple(sorted((k, hashable_key(v)) for k, v in key.items()))
    return key


def _output_default(obj: Any) -> Any:
    # A windowed key nested in a value: the same flat shape as a row's key.
    if isinstance(obj, Windowed):
        return obj.to_dict()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


_ms_format = msgspec.json.format


def _table_json(obj: Any) -> str:
    # json.dumps's default separators (", " and ": "): msgspec's compact JSON, spaced
    # by msgspec.json.format(indent=0), where that gives json.dumps's text (fast_json).
    raw = fast_json(obj)
    if raw is not None:
        return _ms_format(raw, indent=0).decode()
    return json.dumps(obj, ensure_ascii=False, default=_output_default)


def row_json(row: dict[str, Any]) -> str:
    """One JSON line (without its newline) of a :func:`~rstreams.windowed.result_row`
    (or of a row with more fields), as every writer of results writes it.

    >>> from rstreams.windowed import Windowed, result_row
    >>> print(row_json(result_row(Windowed("gus", 0, 60000, "event-time"), 3)))
    {"key": "gus", "window": {"start": 0, "end": 60000}, "closed": "event-time", "value": 3}
    """
    return _table_json(row)


def table_lines(table: dict[Any, Any]) -> list[str]:
    """The JSON lines of a final table, one :func:`~rstreams.windowed.result_row` each,
    sorted (byte-identical files for equal tables):
    ``{"key": ..., "value": ...}``, and for windowed keys
    ``{"key": ..., "window": {"start": ..., "end": ...}, ["closed": ...,] "value": ...}``.

    >>> from rstreams.windowed import Windowed
    >>> table_lines({"gus": 3})
    ['{"key": "gus", "value": 3}\\n']
    >>> table_lines({Windowed("gus", 0, 60000): 2})
    ['{"key": "gus", "window": {"start": 0, "end": 60000}, "value": 2}\\n']
    """
    # Sorted (by the key's JSON, then the window): the same table gives the same bytes
    # whatever order its keys were folded in (queues, workers, backends).
    if any(type(k) is Windowed for k in table):
        return sorted(row_json(result_row(k, v)) + "\n" for k, v in table.items())
    keys = json_texts(list(table), _table_json)
    values = json_texts(list(table.values()), _table_json)
    return sorted(f'{{"key": {k}, "value": {v}}}\n' for k, v in zip(keys, values))


def check_data_dir(path: str, option: str = "--data-dir", *, write: bool = True) -> None:
    """Refuse a data directory that can not be used, before a command opens a log in it.

    ``path`` must be a directory or a path that can be created as one: not a file, not
    under a file and, when the command writes (``write``: every command that opens the
    log takes its lock files), writable where it exists or is to be created. ``option``
    names the path in the message.

        >>> import tempfile, os
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     check_data_dir(os.path.join(f.name, "jobs"))
        Traceback (most recent call last):
        ...
        rstreams.errors.ConfigError: --data-dir '...' is under the file '...'; give a directory
    """
    p = Path(path)
    for up in (p, *p.parents):
        if not up.exists():
            continue
        if not up.is_dir():
            what = "is a file" if up == p else f"is under the file {str(up)!r}"
            raise ConfigError(f"{option} {path!r} {what}; give a directory")
        # os.access also sees a read-only mount, which chmod bits alone do not show (root).
        if write and not os.access(up, os.W_OK | os.X_OK):
            what = "is not writable"
            if up != p:
                what = f"can not be created: {str(up)!r} {what}"
            raise ConfigError(
                f"{option} {path!r} {what} (read-only file system or no permission); the job's "
                "log, its locks and state are written there: give a writable directory"
            )
        return


def check_output_path(path: str, option: str = "output") -> None:
    """Refuse an output path that can not be written, before a run does its work.

    ``path`` is where a file will be written (replaced if it exists): its directory
    must exist and be writable, and the path must not be a directory. ``-`` (stdout)
    and URLs other than ``file:`` (Spark writes those) are not checked; ``option``
    names the path in the message.

        >>> check_output_path("/no/such/out.jsonl", "--output")
        Traceback (most recent call last):
        ...
        rstreams.errors.ConfigError: --output '/no/such/out.jsonl': directory '/no/such' does...
    """
    if path == "-":
        return
    if path.startswith("file:"):
        from urllib.parse import urlparse

        path = urlparse(path).path or path[5:]
    elif "://" in path:
        return
    target = Path(path)
    parent = target.parent
    where = f"{option} {path!r}"
    if target.is_dir():
        raise ConfigError(f"{where} is a directory; give a file path (e.g. {path}/out.jsonl)")
    if not parent.exists():
        # (exists() is False under a regular file too: tell the two apart)
        for up in parent.parents:
            if up.exists():
                if not up.is_dir():
                    raise ConfigError(f"{where}: {str(up)!r} is a file, not a directory")
                break
        raise ConfigError(f"{where}: directory {str(parent)!r} does not exist; create it first")
    if not parent.is_dir():
        raise ConfigError(f"{where}: {str(parent)!r} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: directory {str(parent)!r} is not writable")
    if target.exists() and not target.is_file():
        raise ConfigError(f"{where} exists and is not a regular file")


def _write_lines(lines: list[str], path: str) -> None:
    """Write ``lines`` to ``path`` atomically: a temp file beside it, renamed into place,
    and removed again if anything fails, so a failed write leaves nothing behind."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(lines)
        tmp.replace(target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise RStreamsError(f"could not write {path!r}: {e.strerror or e}") from None


def write_table(table: dict[Any, Any], path: str | IO[str]) -> None:
    """Write a final table as the JSON lines of :func:`table_lines`: to a file
    atomically (a temp file renamed into place; the file's directory must exist), or to
    an open text stream."""

    if not isinstance(path, str):
        path.writelines(table_lines(table))
        path.flush()
        return
    _write_lines(table_lines(table), path)


def write_dead_letters(records: list[dict[str, Any]], path: str | IO[str]) -> None:
    """Write dead letters (see :attr:`RunResult.dead_letters`) as JSON lines, to a file
    atomically or to an open text stream."""
    lines = [_table_json(r) + "\n" for r in records]
    if not isinstance(path, str):
        path.writelines(lines)
        path.flush()
        return
    _write_lines(lines, path)
