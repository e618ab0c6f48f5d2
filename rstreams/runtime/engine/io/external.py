"""Redis streams other programs own, as sources and sinks of a job (``RedisStream``).

**Sources.** The supervisor copies a stream's new entries into the job's own source
topic, as it appends input files: in chunks, round-robin over the topic's queues, and
the last record of every chunk carries in a header where the copy got to (the last
entry id copied, and how many entries the stream had been given up to it). So the copy
and its position are one append to the job's log: on the Redis broker one MULTI/EXEC,
on the file log one record batch; a crash keeps both or neither, and a later run goes
on after the newest position. The stream itself is only read (XINFO, XRANGE, XREAD): no
deletes, no trimming, no consumer group.

Each read is one MULTI/EXEC of ``XINFO STREAM`` and ``XRANGE (<position> +``, a
consistent snapshot, which shows entries the job never copied that are gone (trimmed
or deleted by their owner): an entry deleted above the position before the first one
read (``max-deleted-entry-id``), or, once the read reaches the stream's end, fewer
entries than the stream was given since the position (``entries-added``). A stream
deleted, or deleted and created again, is found the same way. Each stops the run with
an error naming the stream, the position and what to do: skipping would be silent loss.

A bounded run copies up to the stream's last entry when it starts; a ``--follow`` run
goes on tailing it (``XREAD BLOCK``).

**Sinks.** An egress step copies the job's sink topic (which holds only committed
output) into the stream, ``XADD`` of fields, and moves its own position (per queue of
the topic, a hash in the job's key space) in the same MULTI/EXEC, under WATCH of that
position: an egress that crashed, or another supervisor of the job copying at the same
time, can not add an entry twice. Egress rather than appending in the workers' commit:
it works whatever broker holds the job's topics, and the commit path (and its fencing)
stays the broker's alone; the cost is the latency of one supervisor step.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

import attrs

from rstreams.errors import ConfigError, FencedError
from rstreams.runtime.engine.io.ingest import last_headers, record_input_end
from rstreams.runtime.positions import entry_position, position_bases, position_header
from rstreams.runtime.streamentries import entry_fields, entry_record
from rstreams.runtime.streamentries import entry_id as _id

if TYPE_CHECKING:
    from rstreams.dsl.external import RedisStream
    from rstreams.planner.topology import Topology
    from rstreams.runtime.queues.broker import Broker

__all__ = [
    "EXTERNAL_HEADER",
    "Egress",
    "ExternalIngest",
    "Externals",
    "StreamPosition",
    "check_external_broker",
    "egress_key",
    "entry_fields",
    "entry_record",
    "last_position",
]

log = logging.getLogger("rstreams.supervisor")

#: The header on the last record of each chunk copied from an external stream: the JSON
#: of its :class:`StreamPosition`.
EXTERNAL_HEADER = "rstreams-redis-stream"


def check_external_broker(topology: Topology, broker_url: str | None) -> str | None:
    """The Redis URL external streams are read and written on (the run's ``--broker``),
    None if the topology has none; ConfigError if it has some and the broker is not
    Redis."""
    streams = {**topology.external_sources, **topology.external_sinks}
    if not streams:
        return None
    if broker_url is None or not broker_url.startswith(("redis://", "rediss://", "unix://")):
        names = ", ".join(f"{t!r} (stream {s.stream!r})" for t, s in streams.items())
        raise ConfigError(
            f"topic(s) {names} of job {topology.job_id!r} are Redis streams: run the job "
            f"with --broker redis://<host>:<port>/<db>, the server that holds them"
        )
    return broker_url


@attrs.frozen
class StreamPosition:
    """How far the job copied an external stream."""

    stream: str
    #: The last entry id copied ("0-0": none yet).
    id: str = "0-0"
    #: Entries the stream had been given (``entries-added``) up to and including ``id``.
    added: int = 0

    def encode(self) -> bytes:
        return json.dumps(attrs.asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> StreamPosition:
        return cls(**json.loads(value))


def last_position(broker: Broker, topic: str, stream: str) -> StreamPosition:
    """The newest position copied from ``stream`` into ``topic``: the furthest among
    the last records of the topic's queues (chunks go round-robin over them)."""
    best = StreamPosition(stream)
    for value in last_headers(broker, topic, EXTERNAL_HEADER):
        pos = StreamPosition.decode(value)
        if pos.stream == stream and _id(pos.id) > _id(best.id):
            best = pos
    return best


def _lost(topic: str, pos: StreamPosition, what: str) -> ConfigError:
    return ConfigError(
        f"the Redis stream {pos.stream!r} (source topic {topic!r}) {what}; the job had "
        f"copied it up to entry {pos.id} and will not skip what it can not read. Keep "
        f"entries until the job has copied them (trim with XTRIM {pos.stream} MINID <an id "
        f"at most {pos.id}>), or run with --fresh to start over from what the stream holds now"
    )


@attrs.define
class _Source:
    """One external stream being copied into its source topic."""

    topic: str
    spec: RedisStream
    queues: int
    position: StreamPosition
    #: A bounded run copies up to the stream's last entry at start (None: following).
    target: tuple[int, int] | None = None
    copied: int = 0
    ended_at: dict[int, int] = attrs.field(factory=dict)
    #: A bounded run found nothing more up to ``target`` (the entries it had at start
    #: up to there may have been deleted since: then the position never gets there).
    finished: bool = False

    @property
    def done(self) -> bool:
        return self.target is not None and (self.finished or _id(self.position.id) >= self.target)


class ExternalIngest:
    """Copies new entries of external streams into the job's source topics (see the
    module's docstring): ``step`` copies a chunk of each, ``wait`` blocks on the streams
    (``XREAD BLOCK``) for a following run with nothing left to copy."""

    def __init__(
        self, client: Any, broker: Broker, topology: Topology, queue_counts: dict[str, int],
        *, chunk: int, follow: bool,
    ) -> None:  # fmt: skip
        self.client = client
        self.broker = broker
        self.job_id = topology.job_id
        self.chunk = chunk
        self.sources = [
            _Source(topic, spec, queue_counts[topic], last_position(broker, topic, spec.stream))
            for topic, spec in topology.external_sources.items()
        ]
        self._rr = 0
        # A temporal join's tie rule: each entry's position, from its entry id.
        self.bases = position_bases(topology)
        for src in self.sources if not follow else ():
            info = self._info(src)
            if info is None:
                raise ConfigError(
                    f"the Redis stream {src.spec.stream!r} (source topic {src.topic!r}) does "
                    f"not exist; create it (XADD), or run with --follow to wait for entries"
                )
            src.target = _id(info["last-generated-id"])

    @property
    def done(self) -> bool:
        """A bounded run copied every stream up to its last entry at start."""
        return all(src.done for src in self.sources)

    def _info(self, src: _Source) -> dict[str, Any] | None:
        import redis

        try:
            info: dict[str, Any] = self.client.xinfo_stream(src.spec.stream)
        except redis.ResponseError as e:
            if "no such key" not in str(e).lower():
                raise
            return None
        return info

    def step(self) -> bool:
        """Copy the next chunk of each stream that has new entries; True if any had."""
        copied = False
        for src in self.sources:
            if not src.done and self._copy(src):
                copied = True
        return copied

    def resync(self) -> None:
        """Go on from the position each source topic holds (after the connection broke,
        the last copy may or may not have been applied)."""
        for src in self.sources:
            src.position = last_position(self.broker, src.topic, src.spec.stream)

    def _copy(self, src: _Source) -> bool:
        import redis

        pos = src.position
        pipe = self.client.pipeline(transaction=True)
        pipe.xinfo_stream(src.spec.stream)
        pipe.xrange(src.spec.stream, min=f"({pos.id}", max="+", count=self.chunk)
        info, entries = pipe.execute(raise_on_error=False)
        if isinstance(entries, Exception):
            raise entries
        if isinstance(info, redis.ResponseError) and "no such key" in str(info).lower():
            if pos.id != "0-0":
                raise _lost(src.topic, pos, "no longer exists (it was deleted)")
            src.finished = True  # (a bounded run: what it had at start went with it)
            return False
        if isinstance(info, Exception):
            raise info
        added = self._check(src, info, entries)
        if src.target is not None:
            kept = [e for e in entries if _id(e[0]) <= src.target]
            src.finished = len(kept) < len(entries) or len(entries) < self.chunk
            entries = kept
        if not entries:
            record_input_end(self.broker, self.job_id, src.topic, src.queues, src.ended_at)
            return False
        end = StreamPosition(pos.stream, entries[-1][0].decode(), added + len(entries))
        rows = [entry_record(src.spec, eid, fields) for eid, fields in entries]
        base = self.bases.get(src.topic)
        if base is not None:
            rows = [
                (ts, k, v, (*h, position_header(entry_position(base, eid))))
                for (ts, k, v, h), (eid, _) in zip(rows, entries)
            ]
        ts, key, value, heads = rows[-1]
        rows[-1] = (ts, key, value, (*heads, (EXTERNAL_HEADER, end.encode())))
        # One append: the entries and the position they take the copy to (see above).
        self.broker.append(src.topic, self._rr % src.queues, rows)
        self.broker.flush()
        self._rr += 1
        src.position = end
        src.copied += len(entries)
        if src.done:  # (for watermarks: the input has ended, see record_input_end)
            record_input_end(self.broker, self.job_id, src.topic, src.queues, src.ended_at)
        return True

    def _check(self, src: _Source, info: dict[str, Any], entries: list[Any]) -> int:
        """Refuse a stream that lost entries the job did not copy (ConfigError); returns
        the entries the stream had been given up to the position (see StreamPosition)."""
        pos, added = src.position, int(info["entries-added"])
        at_end = len(entries) < self.chunk
        if pos.id == "0-0":  # the first read: what is gone already was never the job's
            return added - len(entries) if at_end else added - int(info["length"])
        if added < pos.added or (at_end and added - pos.added < len(entries)):
            # (entries-added restarted: more entries after the position than were added)
            raise _lost(
                src.topic, pos,
                f"was deleted and created again (it was given {added} entries in all, "
                f"{len(entries)} of them after the {pos.added} the job counted)",
            )  # fmt: skip
        deleted = _id(info.get("max-deleted-entry-id") or b"0-0")
        first = _id(entries[0][0]) if entries else None
        if deleted > _id(pos.id) and (first is None or deleted < first):
            raise _lost(
                src.topic, pos, f"lost entries up to {_id_text(deleted)} (trimmed or deleted)"
            )
        if at_end and added - pos.added > len(entries):
            gone = added - pos.added - len(entries)
            raise _lost(
                src.topic, pos, f"lost {gone} entries the job did not copy (trimmed or deleted)"
            )
        return pos.added

    def wait(self, timeout_ms: int) -> None:
        """Block until an external stream has an entry after the job's position (or
        ``timeout_ms`` passes): ``XREAD BLOCK``, reading nothing for the job."""
        if self.sources:
            streams = {src.spec.stream: src.position.id for src in self.sources}
            self.client.xread(streams, count=1, block=timeout_ms)
        else:
            time.sleep(timeout_ms / 1000)

    def copied(self) -> int:
        """Entries copied in this run."""
        return sum(src.copied for src in self.sources)


def _id_text(entry_id: tuple[int, int]) -> str:
    return f"{entry_id[0]}-{entry_id[1]}"


def egress_key(job_id: str, topic: str) -> str:
    """The hash (queue -> next offset) of how far sink ``topic`` was copied to its
    stream: in the job's key space (its hash tag), beside its queues' keys."""
    return f"rs:{{{job_id}}}:egress:{topic}"


class Egress:
    """Copies the job's sink topics into their external streams, exactly once (see the
    module's docstring)."""

    def __init__(
        self, client: Any, broker: Broker, topology: Topology, queue_counts: dict[str, int],
        *, chunk: int = 1000, fence: tuple[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.client = client
        self.broker = broker
        self.chunk = chunk
        #: ``(key, value)`` a copy checks in its transaction: the job lock's generation
        #: (a run that lost the lock copies nothing more).
        self.fence = fence
        self.sinks = [
            (topic, spec, topology.topics[topic], egress_key(topology.job_id, topic), q)
            for topic, spec in topology.external_sinks.items()
            for q in range(queue_counts[topic])
        ]
        #: Entries added in this run.
        self.written = 0

    def step(self) -> bool:
        """Copy the next records of every sink queue that has some; True if any had."""
        import redis

        moved = False
        for topic, spec, topic_spec, key, q in self.sinks:
            if self.broker.end_offset(topic, q) <= self._position(key, q):
                continue
            with self.client.pipeline(transaction=True) as pipe:
                # Another egress moving it first, or the lock changing hands, voids this copy.
                pipe.watch(key, *(self.fence[:1] if self.fence else ()))
                if self.fence is not None:
                    held = pipe.get(self.fence[0])
                    if (held.decode() if held is not None else None) != self.fence[1]:
                        raise FencedError(
                            f"copy to the Redis stream {spec.stream!r} refused: "
                            f"{self.fence[0]} no longer holds {self.fence[1]!r} (another run "
                            "took the job lock); nothing of it was applied"
                        )
                pos = int(pipe.hget(key, str(q)) or 0)
                start = self.broker.start_offset(topic, q)
                if pos < start:
                    raise ConfigError(
                        f"records {pos}..{start - 1} of sink topic {topic}[{q}] were removed "
                        f"(retention) before they were copied to the Redis stream "
                        f"{spec.stream!r}; keep the topic longer, or run with --fresh"
                    )
                records = self.broker.read(topic, q, pos, self.chunk)
                if not records:
                    continue
                de_key, de_value = (
                    topic_spec.key_serde.deserialize,
                    topic_spec.value_serde.deserialize,
                )
                pipe.multi()
                for rec in records:
                    k = None if rec.key is None else de_key(rec.key)
                    v = None if rec.value is None else de_value(rec.value)
                    pipe.xadd(spec.stream, entry_fields(spec, k, v, rec.timestamp))
                pipe.hset(key, str(q), records[-1].offset + 1)
                try:
                    pipe.execute()
                except redis.WatchError:
                    continue  # (read again next step)
            self.written += len(records)
            moved = True
        return moved

    def _position(self, key: str, q: int) -> int:
        return int(self.client.hget(key, str(q)) or 0)

    def drained(self) -> bool:
        """Is every sink queue copied up to its end?"""
        return all(
            self._position(key, q) >= self.broker.end_offset(topic, q)
            for topic, _, _, key, q in self.sinks
        )


class Externals:
    """A run's external streams: the ingest of its sources and the egress of its sinks,
    on one client of the run's Redis (``client``: its own, closed by :meth:`close`)."""

    def __init__(
        self, client: Any, broker: Broker, topology: Topology, queue_counts: dict[str, int],
        *, chunk: int, follow: bool, fence: tuple[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.client = client  # (closed with this)
        try:
            self.ingest = ExternalIngest(
                self.client, broker, topology, queue_counts, chunk=chunk, follow=follow
            )
            self.egress = Egress(self.client, broker, topology, queue_counts, fence=fence)
        except BaseException:
            self.client.close()
            raise

    def step(self) -> bool:
        """Copy what there is to copy in and out; True if anything was."""
        copied = self.ingest.step()
        return self.egress.step() or copied

    def drain(self) -> None:
        """Copy every sink topic to its end (a bounded run, once all is committed)."""
        while not self.egress.drained():
            self.egress.step()

    def close(self) -> None:
        self.client.close()
