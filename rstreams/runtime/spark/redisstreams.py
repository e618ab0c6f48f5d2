"""Redis streams (``RedisStream``) as Spark sources and sinks: a PySpark Python data
source, ``rstreams-redis``, with a batch reader, a streaming reader and a batch writer.

No JVM connector: the readers and the writer run in Spark's Python workers with the
``redis`` client. An entry becomes a row, and a row an entry, by the mapping the
embedded runtime uses (:mod:`rstreams.runtime.streamentries`), so one pipeline gives
the same table on either backend.

**Reading.** A batch run reads a stream up to its last entry when the run starts (the
driver asks ``XINFO STREAM`` once, so every Spark action over the source sees the same
entries); a streaming query's offsets are entry ids (``{"id": "<ms>-<seq>"}``), one
partition per micro-batch holding ``(start, end]``. The stream is only read (``XRANGE``):
no consumer group, no deletes.

**Writing.** A sink's final table (one row per key) is added to its stream with
``XADD``, one pipeline per chunk of a partition. Spark retries a failed task, and an
entry already added can not be taken back, so a retried task may add some entries twice
(a reader that keeps the last entry per key sees the same table).

**Connection.** Executors connect with the :class:`RedisTarget`'s JSON, passed in the
data source's options. Spark shows those options (plans, UI), so the password may not
be in them: a password must come from a password file, a path every executor can read
(the same path on every host), which each executor reads when it connects.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from rstreams.dsl.external import RedisStream
from rstreams.errors import ConfigError
from rstreams.runtime.queues.redisstreams.target import RedisTarget, connect
from rstreams.runtime.streamentries import (
    BAD_ENTRY_HEADER,
    BadEntryError,
    entry_fields,
    entry_id,
    entry_record,
    not_text,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["NAME", "RedisDataSource", "read_stream", "spark_target", "write_stream"]

#: The data source's name (``spark.read.format(NAME)``).
NAME = "rstreams-redis"

#: Rows of a stream: the key and value fields as text (UTF-8; None when missing) and
#: the entry id (milliseconds, sequence) that orders them.
SCHEMA = "k string, v string, ms bigint, seq bigint"

_CHUNK = 1000


def spark_target(target: str | RedisTarget) -> RedisTarget:
    """The Redis server of a Spark run's external streams (a URL or a target), refused
    when its password would travel in the data source's options (see the module's
    docstring)."""
    t = target if isinstance(target, RedisTarget) else RedisTarget.parse(target)
    if t.password is not None and t.password_file is None:
        raise ConfigError(
            f"Spark shows a data source's options, so the password of {t.redacted} can "
            f"not go to its executors in them: take it out of the URL and give it in a "
            f"password file readable at the same path on every executor: "
            f"--broker-password-file PATH with `rstreams run`, "
            f"RedisTarget.parse(url, password_file=...) from Python"
        )
    return t


def _options(target: RedisTarget, spec: RedisStream) -> dict[str, str]:
    return {
        "target": target.to_json(),
        "stream": spec.stream,
        "value": spec.value or "",
        "key": spec.key or "",
        "timestamp": spec.timestamp,
    }


def _spec(options: dict[str, str]) -> RedisStream:
    return RedisStream(
        options["stream"],
        value=options.get("value") or None,
        key=options.get("key") or None,
        timestamp=options.get("timestamp") or "id",
    )


def _client(options: dict[str, str]) -> Any:
    return connect(RedisTarget.from_json(options["target"]))


def _last_id(client: Any, stream: str) -> str | None:
    """The stream's last entry id (``last-generated-id``), None if it does not exist."""
    import redis

    try:
        info = client.xinfo_stream(stream)
    except redis.ResponseError as e:
        if "no such key" not in str(e).lower():
            raise
        return None
    last = info["last-generated-id"]
    return last.decode() if isinstance(last, bytes) else str(last)


def _text(raw: bytes | None, spec: Any, eid: bytes, what: str) -> str | None:
    """A field as the row's text; bytes that are not UTF-8 are an error naming the
    stream and the entry (never replacement characters: junk would become keys)."""
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError as e:
        raise BadEntryError(not_text(spec, eid, what, e)) from None


def _rows(options: dict[str, str], after: str, upto: str) -> Iterator[tuple[Any, ...]]:
    """The rows of the entries after id ``after`` up to id ``upto``, read in chunks."""
    spec, end = _spec(options), entry_id(upto)
    client = _client(options)
    try:
        while entry_id(after) < end:
            entries = client.xrange(spec.stream, min=f"({after}", max=upto, count=_CHUNK)
            for eid, fields in entries:
                _, key, value, headers = entry_record(spec, eid, fields)
                if headers:
                    for why in (v.decode() for k, v in headers if k == BAD_ENTRY_HEADER):
                        raise BadEntryError(why)
                ms, seq = entry_id(eid)
                yield (
                    _text(key, spec, eid, f"key field {spec.key!r}"),
                    _text(value, spec, eid, f"value field {spec.value!r}"),
                    ms,
                    seq,
                )
            if len(entries) < _CHUNK:
                return
            after = entries[-1][0].decode()
    finally:
        client.close()


class _BatchReader(DataSourceReader):
    """The entries up to the id the driver found at the start of the run."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return _rows(self.options, "0-0", self.options["upto"])


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of entries; offsets are entry ids."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.target: str | None = None  # (availableNow: the last id at the query's start)

    def _latest(self) -> str:
        client = _client(self.options)
        try:
            return _last_id(client, self.options["stream"]) or "0-0"
        finally:
            client.close()

    def initialOffset(self) -> dict[str, str]:
        return {"id": "0-0"}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest()

    def latestOffset(self, start: dict[str, str], limit: Any) -> dict[str, str]:
        latest = self.target if self.target is not None else self._latest()
        return {"id": max(start["id"], latest, key=entry_id)}

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[InputPartition]:
        return [InputPartition((start["id"], end["id"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        after, upto = partition.value
        return _rows(self.options, after, upto)


class _Writer(DataSourceWriter):
    """XADDs of a sink's final-table lines (``{"key": ..., "value": ...}``)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        spec = _spec(self.options)
        now = int(time.time() * 1000)  # (a final table has no record times)
        client = _client(self.options)
        try:
            pipe = client.pipeline(transaction=False)
            for n, row in enumerate(iterator, 1):
                doc = json.loads(row[0])
                pipe.xadd(spec.stream, entry_fields(spec, doc.get("key"), doc.get("value"), now))
                if n % _CHUNK == 0:
                    pipe.execute()
            pipe.execute()
        finally:
            client.close()
        return WriterCommitMessage()


class RedisDataSource(DataSource):
    """``rstreams-redis``: a Redis stream's entries as rows ``(k, v, ms, seq)``, and
    final-table lines as entries. Options: ``target`` (:meth:`RedisTarget.to_json`),
    ``stream``, ``value``, ``key``, ``timestamp`` (a :class:`RedisStream`), and for a
    batch read ``upto`` (the last entry id to read)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(dict(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader(dict(self.options))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return _Writer(dict(self.options))


def _register(spark: SparkSession) -> None:
    spark.dataSource.register(RedisDataSource)


def read_stream(
    spark: SparkSession, target: RedisTarget, spec: RedisStream, topic: str, streaming: bool
) -> DataFrame:
    """The rows of stream ``spec`` (source topic ``topic``): in a batch run up to its
    last entry now (ConfigError if it does not exist, as on the embedded runtime)."""
    _register(spark)
    options = _options(target, spec)
    if streaming:
        return spark.readStream.format(NAME).options(**options).load()
    client = connect(target)
    try:
        upto = _last_id(client, spec.stream)
    finally:
        client.close()
    if upto is None:
        raise ConfigError(
            f"the Redis stream {spec.stream!r} (source topic {topic!r}) does not exist; "
            f"create it (XADD), or run with streaming to wait for entries"
        )
    return spark.read.format(NAME).options(**options, upto=upto).load()


def write_stream(lines: DataFrame, target: RedisTarget, spec: RedisStream) -> None:
    """Add the final-table ``lines`` (one string column of JSON) to stream ``spec``."""
    _register(lines.sparkSession)
    lines.write.format(NAME).options(**_options(target, spec)).mode("append").save()
