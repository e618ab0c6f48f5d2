"""How a Redis stream's entries become records and records become entries
(``RedisStream``): one mapping for both backends (the embedded runtime's ingest and
egress, and Spark's ``rstreams-redis`` data source), so they read and write the same."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from rstreams.serde import fast_json

if TYPE_CHECKING:
    from rstreams.dsl.external import RedisStream

__all__ = ["BAD_ENTRY_HEADER", "BadEntryError", "bad_entries", "entry_fields", "entry_id",
           "entry_record", "not_text"]  # fmt: skip

#: The header of a record whose entry could not be read as the source declares (a field
#: that is not UTF-8 in whole-entry mode): its value says why, naming the stream, the
#: entry id and the field. The source step applies ``on_error`` to such a record (fail,
#: skip, or dead-letter), as to a record its deserializer refuses.
BAD_ENTRY_HEADER = "rstreams-bad-entry"


class BadEntryError(ValueError):
    """An entry of an external stream that can not be read as its source declares."""


def bad_entries(headers: list[Any]) -> list[tuple[int, str]]:
    """``(row, why)`` of each row of a batch whose headers carry :data:`BAD_ENTRY_HEADER`."""
    return [
        (i, value.decode())
        for i, row in enumerate(headers)
        if row
        for name, value in row
        if name == BAD_ENTRY_HEADER
    ]


#: ``(timestamp, key, value, headers)``, as the queue layer's ``Record``.
Record = tuple[int, bytes | None, bytes | None, tuple[Any, ...]]


def entry_id(raw: bytes | str) -> tuple[int, int]:
    """``(milliseconds, sequence)`` of an entry id (``b"1700-3"``)."""
    ms, _, seq = (raw.decode() if isinstance(raw, bytes) else raw).partition("-")
    return int(ms), int(seq or 0)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def entry_record(spec: RedisStream, eid: bytes, fields: dict[bytes, bytes]) -> Record:
    """The record an entry becomes: ``(timestamp, key, value, headers)`` as the source
    topic's serdes read them (a missing key or value field: None).

    >>> from rstreams.dsl.external import RedisStream
    >>> entry_record(RedisStream("o", key="id", value="amount"), b"1700-0",
    ...              {b"id": b"7", b"amount": b"12.5"})
    (1700, b'7', b'12.5', ())
    >>> entry_record(RedisStream("o", timestamp="field:ts"), b"1700-0", {b"ts": b"5"})
    (5, None, b'{"ts":"5"}', ())
    """
    ts = entry_id(eid)[0]
    if (ts_field := spec.timestamp_field) is not None:
        with contextlib.suppress(KeyError, ValueError):  # (else: the entry's own time)
            ts = int(fields[ts_field.encode()])
    key = fields.get(spec.key.encode()) if spec.key is not None else None
    if spec.value is not None:
        return ts, key, fields.get(spec.value.encode()), ()
    try:
        doc = {k.decode(): v.decode() for k, v in fields.items()}
    except UnicodeDecodeError:
        # Not replaced silently (junk bytes would become keys): the source step refuses
        # the record, and on_error says what becomes of it; the value keeps the bytes
        # (escaped) for a dead letter.
        doc = {_escaped(k): _escaped(v) for k, v in fields.items()}
        why = _bad_text(spec, eid, fields)
        return ts, key, _json(doc), ((BAD_ENTRY_HEADER, why.encode()),)
    return ts, key, _json(doc), ()


def _json(obj: Any) -> bytes:
    """``json.dumps(obj, separators=(",", ":"), default=str).encode()``: ASCII, the rest
    escaped. msgspec writes the same where :func:`~rstreams.serde.fast_json` does and
    its bytes are ASCII, but for DEL (which json.dumps escapes as ``\\u007f``)."""
    raw = fast_json(obj)
    if raw is not None and raw.isascii() and b"\x7f" not in raw:
        return raw
    return json.dumps(obj, separators=(",", ":"), default=str).encode()


def _escaped(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def not_text(spec: RedisStream, eid: bytes, what: str, e: UnicodeDecodeError) -> str:
    """The words for an entry's ``what`` (a field's name or value) that is not UTF-8,
    naming the stream and the entry id (both backends say it so)."""
    return (
        f"entry {eid.decode()} of the Redis stream {spec.stream!r}: the {what} is not UTF-8 "
        f"({e.reason} at byte {e.start})"
    )


def _bad_text(spec: RedisStream, eid: bytes, fields: dict[bytes, bytes]) -> str:
    """Why an entry is not text: its stream, id, and the first field that is not UTF-8."""
    for name, value in fields.items():
        for part, raw in (("name", name), ("value", value)):
            try:
                raw.decode()
            except UnicodeDecodeError as e:
                what = f"{part} of field {_escaped(name)!r}"
                why = not_text(spec, eid, what, e)
                return f"{why}; a whole-entry source reads every field as text"
    return f"entry {eid.decode()} of the Redis stream {spec.stream!r} is not UTF-8"


def _field(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return _text(value)
    return _json(value).decode()


def entry_fields(spec: RedisStream, key: Any, value: Any, timestamp: int) -> dict[str, str]:
    """The fields of the entry a sink record becomes (numbers and structures as JSON).

    >>> from rstreams.dsl.external import RedisStream
    >>> entry_fields(RedisStream("c", key="word", value="count"), "to", 3, 0)
    {'word': 'to', 'count': '3'}
    >>> entry_fields(RedisStream("c", timestamp="field:ts"), None, {"a": 1.5}, 9)
    {'a': '1.5', 'ts': '9'}
    """
    fields: dict[str, str] = {}
    if spec.key is not None and key is not None:
        fields[spec.key] = _field(key)
    if spec.value is not None:
        fields[spec.value] = _field(value)
    elif isinstance(value, dict):
        fields.update((str(k), _field(v)) for k, v in value.items())
    else:
        fields["value"] = _field(value)
    if (ts_field := spec.timestamp_field) is not None:
        fields[ts_field] = str(timestamp)
    return fields or {"value": ""}  # (an entry needs a field)
