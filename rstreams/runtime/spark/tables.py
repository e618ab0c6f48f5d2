"""Final tables: from sink DataFrames to Python dicts and JSON-lines outputs.

A sink's final table is the last value per key. Keys and values go through the sink's
serializer and back, as the embedded runtime's ``run()`` reads its sink topics, so the
tables are equal value for value and type for type (JSON sinks turn tuples into lists
and tuple keys into tuples again, exactly as there).
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import attrs
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from rstreams.dsl import nodes as n
from rstreams.errors import SerdeError
from rstreams.runtime.results import letter_text, table_lines, write_table
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.segments import ErrorPolicy
from rstreams.serde import JsonSerde, MsgpackSerde, StrSerde

log = logging.getLogger("rstreams.spark")


def is_local(path: str) -> bool:
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or len(scheme) == 1  # (a Windows drive letter)


def local_path(path: str) -> str:
    """``file:/x`` and ``file:///x`` -> ``/x``; other local paths unchanged."""
    if path.startswith("file:"):
        p = urlparse(path).path
        return p or path[5:]
    return path


def table_from_arrow(
    at: pa.Table, key_kind: str, value_kind: str, sink: n.SinkNode, policy: ErrorPolicy
) -> tuple[dict[Any, Any], int]:
    """(final table, records that reached the sink) from a collected final table."""
    rows = at.num_rows
    keys = enc.decode([at.column(c) for c in enc.columns("k", key_kind)], key_kind, rows)
    values = enc.decode([at.column(c) for c in enc.columns("v", value_kind)], value_kind, rows)
    counts = at.column("_n").to_pylist() if rows else []
    table: dict[Any, Any] = {}
    add_rows(table, keys, values, sink, policy)
    return table, sum(counts)


#: Values these serdes give back unchanged (same value, same type).
_SCALARS = {str, int, float, bool, type(None)}
_IDENTITY_SERDES = (JsonSerde, MsgpackSerde)


def _round_trips(serde: Any, values: list[Any]) -> bool:
    """Is ``deserialize(serialize(v)) == v`` (same type) for every value?"""
    kinds = set(map(type, values))
    if type(serde) in _IDENTITY_SERDES:
        return kinds <= _SCALARS
    return type(serde) is StrSerde and kinds <= {str, type(None)}


def add_rows(
    table: dict[Any, Any], keys: list[Any], values: list[Any], sink: n.SinkNode, policy: ErrorPolicy
) -> None:
    """Fold (key, value) rows into ``table`` through the sink's serdes. A value of
    None (a tombstone: a session merged into another) deletes its key, as the embedded
    runtime's tables do (``results.fold_records``)."""
    if _round_trips(sink.key_serde, keys) and _round_trips(sink.value_serde, values):
        table.update(zip(keys, values))  # the common case: str/int keys and values
        if None in values:
            for k, v in zip(keys, values):
                if v is None:
                    table.pop(k, None)
        return
    kser, vser = sink.key_serde.serialize, sink.value_serde.serialize
    kde, vde = sink.key_serde.deserialize, sink.value_serde.deserialize
    for k, v in zip(keys, values):
        try:
            kb = None if k is None else kser(k)
            vb = None if v is None else vser(v)
        except SerdeError as e:
            policy.failed(sink.name, e, key=k, value=v)
            continue
        key = enc.hashable(None if kb is None else kde(kb))
        if vb is None:
            table.pop(key, None)
        else:
            table[key] = vde(vb)


def write_output(spark: SparkSession, table: dict[Any, Any], path: str) -> None:
    """Write a final table as JSON lines, atomically (temp file, then rename)."""
    if is_local(path):
        write_table(table, local_path(path))
        return
    # The same lines as the local file (and the embedded backend) gets.
    lines = [line.rstrip("\n") for line in table_lines(table)]
    df = spark.createDataFrame([(line,) for line in lines], "value string").coalesce(1)
    write_text_atomically(spark, df, path)


def write_text_atomically(spark: SparkSession, df: DataFrame, path: str) -> None:
    """``df`` (one string column) as text files under directory ``path``, committed by
    renaming a temporary directory, so readers never see a partial output."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(hconf)
    tmp = jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}.{uuid.uuid4().hex}.tmp")
    df.write.text(tmp.toString())
    old = None
    if fs.exists(target):
        old = jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}.{uuid.uuid4().hex}.old")
        fs.rename(target, old)
    if not fs.rename(tmp, target):
        raise OSError(f"could not commit output {path!r} (rename from {tmp.toString()})")
    if old is not None:
        fs.delete(old, True)


def write_bytes_atomically(spark: SparkSession, data: bytes, path: str) -> None:
    """Small driver-side files (streaming tables) on local or Hadoop storage."""
    if is_local(path):
        p = Path(local_path(path))
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(p)
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(hconf)
    tmp = jvm.org.apache.hadoop.fs.Path(f"{path}.{uuid.uuid4().hex}.tmp")
    out = fs.create(tmp, True)
    out.write(bytearray(data))
    out.close()
    fs.delete(target, False)
    fs.rename(tmp, target)


def read_bytes(spark: SparkSession, path: str) -> bytes | None:
    if is_local(path):
        p = Path(local_path(path))
        return p.read_bytes() if p.exists() else None
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(hconf)
    if not fs.exists(target):
        return None
    stream = fs.open(target)
    size = fs.getFileStatus(target).getLen()
    buf = jvm.java.nio.ByteBuffer.allocate(size)
    while buf.hasRemaining() and stream.read(buf) >= 0:
        pass
    stream.close()
    return bytes(buf.array())


@attrs.define
class Failures:
    """Records that failed under on_error skip/dead-letter, from all sources of news:
    the worker accumulator (Python steps) and observations (native steps)."""

    on_error: str
    records: list[dict[str, Any]] = attrs.field(factory=list)
    native_count: int = 0

    def add_worker(self, infos: list[dict[str, Any]]) -> None:
        # A recomputed partition reports its failures again: count each record once.
        seen = {_identity(r) for r in self.records}
        for info in infos:
            ident = _identity(info)
            if ident not in seen:
                seen.add(ident)
                self.records.append(info)

    def add_native(self, count: int, rows: list[dict[str, Any]]) -> None:
        self.native_count += count
        self.records.extend(rows)

    @property
    def count(self) -> int:
        worker = sum(1 for r in self.records if not r.get("native"))
        return worker + self.native_count

    def metrics(self) -> dict[str, int]:
        if not self.count:
            return {}
        out = {"skipped": self.count}
        if self.on_error == "dead-letter":
            out["dead_lettered"] = self.count
        return out

    def log(self, limit: int = 20) -> None:
        for info in self.records[:limit]:
            log.warning(
                "step %r failed on a record (key=%s, value=%s)%s: %s (%s)",
                info.get("step"),
                letter_text(info, "key"),
                letter_text(info, "value"),
                f" in {info['fn']}" if info.get("fn") else "",
                info.get("error"),
                "skipped" if self.on_error == "skip" else "dead-lettered",
            )
        if len(self.records) > limit:
            log.warning("... and %d more failed records", self.count - limit)

    def dead_letters(self) -> list[dict[str, Any]]:
        return [
            {
                "step": r.get("step"),
                "topic": r.get("topic"),
                "queue": None,
                "offset": None,
                **{k: v for k, v in r.items() if k.startswith(("key", "value"))},
                "error": r.get("error"),
            }
            for r in self.records
        ]


def _identity(info: dict[str, Any]) -> tuple[Any, ...]:
    return (
        info.get("step"),
        info.get("partition"),
        info.get("seq"),
        info.get("order"),
        info.get("key"),
        info.get("value"),
        info.get("error"),
    )
