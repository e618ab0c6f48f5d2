"""What the admin commands print: a record as ``consume`` shows it (text, or JSON with
the key and value its topic's serde holds) and the committed offset, end and lag of a
group's topic queues (``offsets``, ``group describe``; ``top`` reads the same rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rstreams.errors import SerdeError
from rstreams.runtime.layout import JobLayout
from rstreams.runtime.queues.base import LogRecord
from rstreams.runtime.queues.broker import Broker
from rstreams.serde import SERDES, Serde
from rstreams.windowed import Windowed, result_row


def _decode(b: bytes | None) -> str | None:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.hex()


def topic_serdes(root: Path, topic: str) -> tuple[Serde | None, Serde | None]:
    """The key and value serdes that the job's last topology gave ``topic``, where they
    are built-in ones that give typed values (json, msgpack); None for the others and
    for topics the topology does not know (e.g. written by ``produce``)."""
    from rstreams.planner.diff import TopologyIdentity

    try:
        text = JobLayout.at(root).topology.read_text(encoding="utf-8")
        topics = TopologyIdentity.from_json(text).topics
    except (OSError, UnicodeDecodeError, ValueError):
        return None, None
    for t in topics:
        if t.name == topic:
            return _TYPED_SERDES.get(t.key_serde), _TYPED_SERDES.get(t.value_serde)
    return None, None


#: Serdes whose bytes ``consume --format json`` prints as the JSON values they hold.
_TYPED_SERDES = {name: SERDES[name] for name in ("json", "msgpack")}


def _typed(b: bytes | None, serde: Serde | None) -> Any:
    """A record's key or value for ``--format json``: what its serde reads (a JSON
    value, not a string holding JSON), else its text (or hex, when not UTF-8)."""
    if b is not None and serde is not None:
        try:
            return serde.deserialize(b)
        except SerdeError:
            pass
    return _decode(b)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Windowed):  # nested in a value: the flat shape of a key
        return obj.to_dict()
    if isinstance(obj, bytes):  # a msgpack bin
        return _decode(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def json_line(queue: int, r: LogRecord, kserde: Serde | None, vserde: Serde | None) -> str:
    """``consume --format json``'s line of record ``r`` of ``queue``."""
    key, value = _typed(r.key, kserde), _typed(r.value, vserde)
    row = {"queue": queue, "offset": r.offset, "timestamp": r.timestamp,
           **result_row(key, value)}  # fmt: skip
    return json.dumps(row, ensure_ascii=False, default=_json_default)


def text_line(r: LogRecord) -> str:
    """``consume``'s line of record ``r``: KEY<tab>VALUE as stored, or VALUE alone."""
    key = _decode(r.key)
    val = _decode(r.value) or ""
    return val if key is None else f"{key}\t{val}"


def lag_rows(
    broker: Broker, offsets: dict[tuple[str, int], int]
) -> list[tuple[str, int, int, int, int]]:
    """(topic, queue, committed, end, lag) of each topic queue of ``offsets`` (committed
    offsets), sorted; the lag is what the log holds past the committed offset."""
    rows = []
    for (topic, q), off in sorted(offsets.items()):
        end = broker.end_offset(topic, q)
        rows.append((topic, q, off, end, end - off))
    return rows


def print_lag(broker: Broker, offsets: dict[tuple[str, int], int], indent: str = "") -> None:
    """A table of committed offset, end and lag per topic queue."""
    print(f"{indent}topic\tqueue\tcommitted\tend\tlag")
    for topic, q, off, end, lag in lag_rows(broker, offsets):
        print(f"{indent}{topic}\t{q}\t{off}\t{end}\t{lag}")
