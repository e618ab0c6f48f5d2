"""The Broker protocol on Redis Streams: :class:`RedisBroker`.

Key layout (every key of a job under the hash tag ``{<job>}``, so one script or
transaction may touch any of them, and on Redis Cluster they all live in one slot)::

    rs:{<job>}:q:<topic>:<queue>   a stream per queue: entries of up to 500 records (codec)
    rs:{<job>}:topics              hash: topic -> JSON of its queue count and options
    rs:{<job>}:starts              hash: "<topic>:<queue>" -> start offset (after a purge)
    rs:{<job>}:ends                hash: "<topic>:<queue>" -> end offset (kept by appends)
    rs:{<job>}:gaps                hash: "<topic>:<queue>" -> records compaction removed
    rs:{<job>}:offsets:<group>     hash: "<topic>:<queue>" -> committed offset
    rs:{<job>}:groups              set of the groups that committed

Durability is the server's: a write is acknowledged once Redis has it in memory, and it
survives a restart as its persistence settings say (``appendonly yes`` with
``appendfsync always`` keeps every acknowledged write; ``everysec`` may lose the last
second on a crash of the machine). :meth:`RedisBroker.flush` is therefore a no-op. A
queue that ends below a position the job reached is detected
(:meth:`RedisBroker.check_not_behind`, every read of a stream that is gone, and every
end offset below where this broker saw the queue end: :meth:`RedisBroker.check_reached`
after a lost connection) and is a
:class:`~rstreams.runtime.queues.redisstreams.lost.RedisDataLostError`. See
docs/redis.md for the persistence settings and the faults.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from rstreams.errors import ConfigError
from rstreams.runtime.queues.base import LogRecord, RecordColumns
from rstreams.runtime.queues.broker import (
    check_create_topic,
    check_retention,
    not_compacted,
    purged,
    unknown_queue,
    unknown_topic,
)
from rstreams.runtime.queues.offsets import check_name
from rstreams.runtime.queues.redisstreams import scripts
from rstreams.runtime.queues.redisstreams.codec import (
    ENTRY_RECORDS,
    decode_entries,
    entry_id,
    foreign,
    stored_bytes,
)
from rstreams.runtime.queues.redisstreams.lost import (
    Reached,
    RedisDataDamagedError,
    RedisDataLostError,
    number,
)
from rstreams.runtime.queues.redisstreams.transaction import Transaction

if TYPE_CHECKING:
    import redis

    from rstreams.runtime.queues.redisstreams.target import RedisTarget

#: Entries fetched per XRANGE when a caller wants everything (compaction, retention).
SCAN_CHUNK = 10_000


_F = TypeVar("_F", bound=Callable[..., Any])


def _read_only(method: _F) -> _F:
    """Run a method that only reads once more if the connection broke (a restarted
    server, an idle connection a proxy cut): reading twice changes nothing. Writes are
    never sent again by the broker: one whose reply was lost may have been applied."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as e:
            from redis.exceptions import ConnectionError, TimeoutError

            if not isinstance(e, (ConnectionError, TimeoutError)):
                raise
        return method(*args, **kwargs)

    return run  # type: ignore[return-value]


def _checked(script: Any) -> Callable[..., Any]:
    """``script`` (a registered Lua script), its damaged-number errors raised as
    :class:`RedisDataDamagedError` (see scripts.BAD_NUMBER)."""
    import redis

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return script(*args, **kwargs)
        except redis.ResponseError as e:
            text = str(e)
            if not text.startswith(scripts.BAD_NUMBER):
                raise
            _, key, field, value = [*text.split(" ", 3), "", "", ""][:4]
            value = value.split(" script:", 1)[0]  # (Redis appends where the script was)
            raise RedisDataDamagedError(key, field, value) from None

    return call


class RedisBroker:
    """Topics of queues as Redis streams, consumer-group offsets in hashes.

    ``client`` is a ``redis.Redis`` (bytes replies) that this broker owns from now on
    (:meth:`close` releases its pool); ``namespace`` is the job: every key is under the
    hash tag ``{namespace}``. Offsets are dense from 0; an entry holds up to
    ``entry_records`` records and its id is ``0-(N+1)`` for its last record's offset N
    (see :mod:`~rstreams.runtime.queues.redisstreams.codec`).
    """

    #: Records per stream entry at most (appends of more make several entries).
    entry_records = ENTRY_RECORDS

    #: Records live in the server's memory: the runtime purges what the job consumed of
    #: its shuffle topics after every commit, and trims its source topics as it ingests
    #: (rstreams.runtime.engine.tasks.trim).
    trims_after_commit = True

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        if not isinstance(namespace, str) or not namespace or set(namespace) & set("{}"):
            raise ConfigError(
                f"a Redis broker's namespace (the job) must be a non-empty name without "
                f"braces; got {namespace!r}"
            )
        # Any: redis-py types its replies as bytes | str (decode_responses); ours are bytes.
        self.client: Any = client
        self.namespace = namespace
        self.prefix = f"rs:{{{namespace}}}:"
        self._topics_key = self.prefix + "topics"
        self._starts_key = self.prefix + "starts"
        self._groups_key = self.prefix + "groups"
        self._gaps_key = self.prefix + "gaps"
        self._ends_key = self.prefix + "ends"
        self._write = _checked(client.register_script(scripts.WRITE))
        self._create = client.register_script(scripts.CREATE_TOPIC)
        self._ends = _checked(client.register_script(scripts.ENDS))
        self._read = _checked(client.register_script(scripts.READ))
        self._purge = _checked(client.register_script(scripts.PURGE))
        self._compact = _checked(client.register_script(scripts.COMPACT))
        self._held = _checked(client.register_script(scripts.HELD))
        self._options: dict[str, dict[str, Any]] = {}  # topics are never deleted
        self._reached = Reached()  # (how far each queue was seen to reach: losses)
        self._closed = False
        #: ``(key, value)`` that every write of this broker checks, in the same atomic
        #: step, besides its own fences: the job lock's generation, for the run that owns
        #: the job (see redis_joblock). None: no such fence.
        self.owner_fence: tuple[str, str] | None = None

    @classmethod
    def open(cls, target: RedisTarget, job: str) -> RedisBroker:
        """A broker of job ``job`` on ``target`` (connected and checked by
        :func:`~rstreams.runtime.queues.redisstreams.target.connect`)."""
        from rstreams.runtime.queues.redisstreams.target import connect

        return cls(connect(target), job)

    def __repr__(self) -> str:
        kw = self.client.get_connection_kwargs()
        where = f"{kw.get('host')}:{kw.get('port')}/{kw.get('db', 0)}"
        return f"RedisBroker({where!r}, namespace={self.namespace!r})"

    def __enter__(self) -> RedisBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- keys ---------------------------------------------------------------------------

    def key(self, name: str) -> str:
        """A key of the job (under its hash tag), e.g. for a fence."""
        return self.prefix + name

    def stream_key(self, topic: str, queue: int) -> str:
        """The key of a queue's stream."""
        return f"{self.prefix}q:{topic}:{queue}"

    def offsets_key(self, group: str) -> str:
        return f"{self.prefix}offsets:{group}"

    # -- topics -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"{self!r} is closed")

    def _topic_options(self, name: str) -> dict[str, Any] | None:
        options = self._options.get(name)
        if options is None:
            raw = self.client.hget(self._topics_key, name)
            if raw is None:
                return None
            options = self._options[name] = json.loads(raw)
        return options

    def create_topic(
        self,
        name: str,
        queues: int,
        *,
        compacted: bool = False,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        segment_bytes: int | None = None,
    ) -> None:
        """Create topic ``name`` with ``queues`` streams; a no-op if it exists with as many.

        ``retention_ms``/``retention_bytes`` bound a normal topic by record age and size
        (see :meth:`enforce_retention`); ``segment_bytes`` means nothing on Redis.
        """
        self._check_open()
        old = self._topic_options(name)
        if old is None:
            check_name(name)
        if not check_create_topic(name, queues, None if old is None else old["queues"]):
            return
        check_retention(retention_ms, retention_bytes)
        options = {
            "queues": queues,
            "compacted": compacted,
            "retention_ms": retention_ms,
            "retention_bytes": retention_bytes,
        }
        keys = [self._topics_key] + [self.stream_key(name, q) for q in range(queues)]
        existing = self._create(keys, [name, json.dumps(options)])
        if existing is not None:  # another process created it first
            check_create_topic(name, queues, json.loads(existing)["queues"])
            return
        self._options[name] = options

    @_read_only
    def queue_count(self, name: str) -> int | None:
        """The number of queues of topic ``name``; None if it does not exist."""
        self._check_open()
        options = self._topic_options(name)
        return None if options is None else int(options["queues"])

    @_read_only
    def topics(self) -> dict[str, int]:
        """Every topic of the job (created by any process) and its queue count."""
        self._check_open()
        raw = self.client.hgetall(self._topics_key)
        out = {}
        for name, options in raw.items():
            topic = name.decode()
            self._options.setdefault(topic, json.loads(options))
            out[topic] = int(self._options[topic]["queues"])
        return dict(sorted(out.items()))

    def _key(self, topic: str, queue: int) -> str:
        """The stream key of an existing queue (ConfigError for an unknown one)."""
        self._check_open()
        options = self._topic_options(topic)
        if options is None:
            raise unknown_topic(topic)
        if not 0 <= queue < options["queues"]:
            raise unknown_queue(topic, queue, options["queues"])
        return self.stream_key(topic, queue)

    # -- append -------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        queue: int,
        records: Iterable[tuple[int, bytes | None, bytes | None, tuple]],
    ) -> int:
        """Append (timestamp, key, value, headers) records atomically; the first new offset."""
        return self._apply(topic, queue, lambda tx: tx.append(topic, queue, records))

    def append_columns(
        self,
        topic: str,
        queue: int,
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[tuple],
    ) -> int:
        """:meth:`append` of records given as columns; the first new offset."""
        return self._apply(
            topic,
            queue,
            lambda tx: tx.append_columns(topic, queue, timestamps, keys, values, headers),
        )

    def append_encoded(
        self, topic: str, queue: int, payload: bytes, count: int, max_ts: int
    ) -> int:
        """:meth:`append` of a batch encoded by ``_logformat.encode_batch``."""
        return self._apply(
            topic, queue, lambda tx: tx.append_encoded(topic, queue, payload, count, max_ts)
        )

    def _apply(self, topic: str, queue: int, add: Callable[[Transaction], None]) -> int:
        """One append as its own transaction: its first offset (the end if it adds nothing)."""
        tx = Transaction(self)
        add(tx)
        if not tx.ops:
            return self.end_offset(topic, queue)
        tx.execute()
        return tx.first_offsets[0]

    @contextmanager
    def transaction(self, fence: tuple[str, str] | None = None) -> Iterator[Transaction]:
        """Appends and commits applied together, all or nothing, when the block ends.

        ``fence=(key, expected)``: apply only if ``key`` still holds ``expected`` (checked
        on the server in the same atomic step); otherwise nothing is applied and
        :class:`~rstreams.errors.FencedError` is raised. Use a key of the job
        (:meth:`key`) so it shares the hash tag. An exception inside the block applies
        nothing. After the block, ``tx.first_offsets`` holds the first offset of each
        append, in order::

            with broker.transaction(fence=(broker.key("generation:task-3"), "7")) as tx:
                tx.append("out", 0, records)
                tx.commit("group", "in", 3, 42)
        """
        tx = Transaction(self, fence)
        yield tx
        tx.execute()

    # -- read ---------------------------------------------------------------------------

    def read(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> list[LogRecord]:
        """Records with offsets >= ``offset``, oldest first, at most ``max_records``."""
        return self.read_columns(topic, queue, offset, max_records).records()

    @_read_only
    def read_columns(
        self, topic: str, queue: int, offset: int, max_records: int | None = None
    ) -> RecordColumns:
        """:meth:`read` as columns: the entries from the one holding ``offset`` on, read
        on the server by one script call and decoded here at C speed (see codec)."""
        key = self._key(topic, queue)
        start = max(offset, 0)
        if max_records is None:
            count, entries = "", 0
        else:
            count = str(max(max_records, 0))
            entries = -(-max(max_records, 1) // self.entry_records) + 1
        field = f"{topic}:{queue}"
        reply = self._read(
            [key, self._starts_key, self._ends_key],
            [field, offset, entry_id(start), count, entries],
        )
        status = reply[0]
        if status == b"purged":
            raise purged(topic, queue, offset, int(reply[1]))
        if status == b"lost":
            raise self._gone(topic, queue, key, offset)
        if status == b"foreign":
            raise ConfigError(f"{key}: {foreign(reply[1])}")
        if status == b"empty":
            end = int(reply[1])
            if end == -2:
                raise ConfigError(f"{key}: {foreign()}")
            if end > offset:
                raise RedisDataLostError(
                    topic, queue, key,
                    f"has no entries from offset {offset} on, but ends at offset {end} "
                    "(they were deleted or trimmed under the job)",
                    offset=offset,
                )  # fmt: skip
            return RecordColumns(range(0), [], [], [], [])
        columns = decode_entries(reply[1:], start, max_records)
        if len(columns):
            self._reach(topic, queue, columns.last_offset + 1)
        if (
            not self._options[topic]["compacted"]
            and len(columns)
            and (columns.offsets[0] != offset or not isinstance(columns.offsets, range))
        ):  # only compaction removes records: any other gap is a loss
            raise RedisDataLostError(
                topic, queue, key,
                f"skips from offset {offset} to {columns.offsets[0]} or later although the "
                "topic is not compacted (entries were deleted under the job)",
                offset=offset,
            )  # fmt: skip
        return columns

    @_read_only
    def start_offset(self, topic: str, queue: int) -> int:
        """The first offset that may be read: 0 until a purge or retention moves it."""
        self._key(topic, queue)  # (checks the queue)
        field = f"{topic}:{queue}"
        return number(self.client.hget(self._starts_key, field), self._starts_key, field)

    @_read_only
    def end_offset(self, topic: str, queue: int) -> int:
        """The number of records ever appended: the stream's last generated id (kept by
        XDEL and XTRIM)."""
        return self.end_offsets([(topic, queue)])[0]

    @_read_only
    def end_offsets(self, queues: Iterable[tuple[str, int]]) -> list[int]:
        """:meth:`end_offset` of every queue, in one script call (one round trip)."""
        queues = list(queues)
        keys = [self._key(topic, queue) for topic, queue in queues]
        if not keys:
            return []
        ends = self._ends([*keys, self._ends_key], [f"{t}:{q}" for t, q in queues])
        return [
            self._checked_end(topic, queue, key, int(end))
            for (topic, queue), key, end in zip(queues, keys, ends, strict=True)
        ]

    def _checked_end(self, topic: str, queue: int, key: str, end: int) -> int:
        if end == -1:
            raise self._gone(topic, queue, key, None)
        if end < 0:
            raise ConfigError(f"{key}: {foreign()}")
        self._reach(topic, queue, end, end=True)
        return end

    def _reach(self, topic: str, queue: int, at_least: int, *, end: bool = False) -> None:
        self._reached.note(topic, queue, self.stream_key(topic, queue), at_least, end=end)

    def check_reached(self) -> None:
        """Check that no queue this process saw ends below where it saw it end (after the
        connection to Redis broke: did the server come back with its data?);
        :class:`RedisDataLostError` if one does, or is gone."""
        for topic, queue in self._reached.queues():
            self.end_offset(topic, queue)

    def check_not_behind(self, topic: str, queue: int, committed: int) -> None:
        """Raise :class:`RedisDataLostError` if the queue ends below ``committed``, a
        position the job reached (Redis restarted without its data, or the stream was
        trimmed or deleted under the job)."""
        end = self.end_offset(topic, queue)
        if end < committed:
            raise RedisDataLostError(
                topic, queue, self.stream_key(topic, queue),
                f"ends at offset {end} but the job had reached offset {committed}",
                offset=end,
            )  # fmt: skip

    def _gone(self, topic: str, queue: int, key: str, offset: int | None) -> RedisDataLostError:
        return self._reached.gone(topic, queue, key, offset)

    # -- removing records ---------------------------------------------------------------

    def purge(self, topic: str, queue: int, before: int) -> None:
        """Trim the entries below offset ``before`` (XTRIM MINID) and move the start mark,
        in one atomic step: an empty purged stream still knows where it starts."""
        key = self._key(topic, queue)
        keys = [key, self._starts_key, self._gaps_key, self._ends_key]
        start = int(self._purge(keys, [f"{topic}:{queue}", before]))
        if start == -1:
            raise self._gone(topic, queue, key, before)
        if start == -2:
            raise ConfigError(f"{key}: {foreign()}")

    def _scan(self, topic: str, queue: int) -> Iterator[RecordColumns]:
        """The records of a queue from its start on, in chunks."""
        offset = self.start_offset(topic, queue)
        while len(chunk := self.read_columns(topic, queue, offset, SCAN_CHUNK)):
            yield chunk
            offset = chunk.last_offset + 1

    def compact(self, topic: str, queue: int) -> int:
        """Remove every record of a compacted topic that a later record with the same key
        supersedes; how many were removed. Offsets of what stays do not change.

        The queue is rewritten on the server in one step (scripts.COMPACT), not thinned
        with XDEL, which frees a stream node's memory only once every entry of it is
        gone: the records a changelog keeps are spread over all of them. For that step
        the server holds the queue twice and serves nothing else."""
        key = self._key(topic, queue)
        if not self._options[topic]["compacted"]:
            raise not_compacted(topic)
        scratch = self.key(f"compacting:{topic}:{queue}")
        removed = int(
            self._compact(
                [key, scratch, self._starts_key, self._gaps_key], [100, f"{topic}:{queue}"]
            )
        )
        if removed == -1:
            raise self._gone(topic, queue, key, None)
        return removed

    @_read_only
    def records_held(self, topic: str, queue: int) -> int:
        """Records the queue holds from its start: compaction keeps offsets, so fewer
        than its end minus its start once compacted (one script call; after a purge of
        a compacted queue, an upper bound until its next compaction)."""
        key = self._key(topic, queue)
        keys = [key, self._starts_key, self._gaps_key, self._ends_key]
        held = int(self._held(keys, [f"{topic}:{queue}"]))
        if held < 0:
            self._checked_end(topic, queue, key, held)
        return held

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Drop the oldest records of topics created with ``retention_ms`` (records whose
        timestamp is older, from the start up to the first that is not) or
        ``retention_bytes`` (from the start while the queue's fields hold more bytes);
        the number of records dropped.

        A stream has no segments, so each record is its own "segment": whole records go,
        from the start only, through :meth:`purge` (the start offset moves), and the last
        record of a queue always stays. Each call reads the queues it bounds in full.
        """
        self._check_open()
        now = int(time.time() * 1000) if now_ms is None else now_ms
        dropped = 0
        for topic, count in self.topics().items():
            options = self._options[topic]
            limit_ms, limit_bytes = options["retention_ms"], options["retention_bytes"]
            if options["compacted"] or (limit_ms is None and limit_bytes is None):
                continue
            for q in range(count):
                start = self.start_offset(topic, q)
                before = retention_point(
                    self._scan(topic, q), start,
                    None if limit_ms is None else now - limit_ms, limit_bytes,
                )  # fmt: skip
                if before > start:
                    self.purge(topic, q, before)
                    dropped += before - start
        return dropped

    # -- consumer groups ----------------------------------------------------------------

    def commit(self, group: str, topic: str, queue: int, offset: int) -> None:
        """Record ``group``'s position in a queue. Appends before it are already on the
        server (every append is acknowledged after it is applied)."""
        self.commit_many([(group, topic, queue, offset)])

    def commit_many(self, commits: Sequence[tuple[str, str, int, int]]) -> None:
        """:meth:`commit` of each (group, topic, queue, offset), in one script call
        (all or nothing)."""
        tx = Transaction(self)
        for commit in commits:
            tx.commit(*commit)
        tx.execute()

    @_read_only
    def committed(self, group: str, topic: str, queue: int) -> int:
        """The offset ``group`` last committed for the queue; 0 if none."""
        self._check_open()
        key, field = self.offsets_key(group), f"{topic}:{queue}"
        offset = number(self.client.hget(key, field), key, field)
        if offset and self._topic_options(topic) is not None:
            self._reach(topic, queue, offset)  # (a committed offset is below the end)
        return offset

    @_read_only
    def groups(self) -> list[str]:
        """Every group that committed an offset, sorted."""
        self._check_open()
        return sorted(g.decode() for g in self.client.smembers(self._groups_key))

    @_read_only
    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """``{(topic, queue): offset}`` of everything ``group`` committed."""
        self._check_open()
        out = {}
        key = self.offsets_key(group)
        for field, offset in self.client.hgetall(key).items():
            topic, _, queue = field.decode().rpartition(":")
            if not queue.isdigit():
                raise RedisDataDamagedError(key, field.decode(errors="replace"), offset)
            out[(topic, int(queue))] = number(offset, key, field.decode())
        return dict(sorted(out.items()))

    # -- lifetime -----------------------------------------------------------------------

    def flush(self) -> None:
        """Nothing to do: every write is on the server when it returns, and how durable
        it is there is the server's ``appendonly``/``appendfsync`` (see the module doc)."""

    def close(self) -> None:
        """Release the client's connections; the broker can no longer be used."""
        if not self._closed:
            self._closed = True
            self.client.close()


def retention_point(
    chunks: Iterable[RecordColumns], start: int, oldest_ms: int | None, limit_bytes: int | None
) -> int:
    """The offset retention keeps a queue from, given its records from ``start`` on: the
    first record no older than ``oldest_ms`` and from which the rest fits in
    ``limit_bytes`` (either None: no such bound), never past the last record."""
    sizes: list[tuple[int, int, int]] = []  # (offset, timestamp, bytes)
    for c in chunks:
        sizes += zip(c.offsets, c.timestamps, stored_bytes(c))
    if not sizes:
        return start
    last = len(sizes) - 1
    cut = 0
    if oldest_ms is not None:  # the first record young enough
        cut = next((i for i, (_, ts, _) in enumerate(sizes) if ts >= oldest_ms), last)
    if limit_bytes is not None:  # the first record from which the rest fits
        total, i = sum(b for _, _, b in sizes), 0
        while i < last and total > limit_bytes:
            total -= sizes[i][2]
            i += 1
        cut = max(cut, i)
    cut = min(cut, last)
    return sizes[cut][0] if cut > 0 else start
