"""Streams other programs own: how a Redis stream's entries become records, and back.

A :class:`RedisStream` is plain data. ``b.source(RedisStream("orders", ...))`` reads a
stream that any Redis client writes (``XADD orders * id 7 amount 12.5``), and
``.sink(RedisStream("totals", ...))`` writes entries any client can read. The runtime
(with ``--broker redis://...``) copies such a source into the job's own source topic,
and the job's sink topic into such a sink, exactly once; the DSL only records what the
user asked for.

    >>> from rstreams import StreamBuilder
    >>> b = StreamBuilder("shop")
    >>> orders = b.source(RedisStream("orders", key="id", value="amount"), "json")
    >>> orders.groupByKey().sum().sink(RedisStream("totals", key="id", value="total"))
    >>> b.build().external_sources["orders"].value
    'amount'
"""

from __future__ import annotations

from typing import Any

import attrs

from rstreams.errors import TopologyError

__all__ = ["RedisStream"]


def _field_name(what: str) -> Any:
    def check(_: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and (not isinstance(value, str) or not value):
            raise TopologyError(f"RedisStream({attr.name}=...) must be {what}; got {value!r}")

    return check


def _timestamp(_: Any, __: Any, value: Any) -> None:
    if value != "id" and not (isinstance(value, str) and value.startswith("field:") and value[6:]):
        raise TopologyError(
            f"RedisStream(timestamp=...) must be 'id' (the entry id's milliseconds) or "
            f"'field:<name>' (a field holding milliseconds); got {value!r}"
        )


@attrs.frozen
class RedisStream:
    """A Redis stream outside the job, as a source or a sink.

    Attributes:
        stream: the stream's key, as other programs name it (``XADD <stream> ...``).
        value: the field that is a record's value; None: all fields, as a dict (read as
            JSON by default). As a sink, None writes a dict value's items as fields (and
            any other value as the field ``value``).
        key: the field that is a record's key (None: no key; as a sink, no key field).
        timestamp: ``"id"``: the entry id's milliseconds (as a sink: the server's clock
            gives the id); ``"field:<name>"``: a field holding epoch milliseconds (as a
            sink: the record's timestamp is written to it).
    """

    stream: str = attrs.field(validator=_field_name("a non-empty stream name"))
    value: str | None = attrs.field(default=None, validator=_field_name("a field name or None"))
    key: str | None = attrs.field(default=None, validator=_field_name("a field name or None"))
    timestamp: str = attrs.field(default="id", validator=_timestamp)

    @property
    def timestamp_field(self) -> str | None:
        """The field holding the timestamp, None when it is the entry id's time."""
        return self.timestamp[6:] if self.timestamp.startswith("field:") else None


def external_topic(topic: Any, external: RedisStream | None, method: str) -> tuple[str, Any]:
    """``(topic, external stream or None)`` of ``source(...)``/``sink(...)``'s first
    argument (a topic name or a :class:`RedisStream`) and its ``external=``."""
    if isinstance(topic, RedisStream):
        if external is not None:
            raise TopologyError(f"{method}() was given a RedisStream twice")
        return topic.stream, topic
    if external is not None and not isinstance(external, RedisStream):
        raise TopologyError(
            f"{method}(external=...) must be a RedisStream; got {type(external).__name__}"
        )
    return topic, external
