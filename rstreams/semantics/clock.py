"""Stream time, one implementation for every backend: :class:`StepClock`.

A step that judges event time (a windowed aggregation, a join) judges each record by
the **minimum over the producers** feeding it of the time each had reached (docs/windows.md,
event time). How that time travels differs by backend, what it is does not:

* the embedded engine: each task has a :class:`StepClock`, built from its
  :class:`ClockPlan` (:func:`plan_clock`, from the topology and the queue counts). The
  task hands it the control records of its input queues (:meth:`StepClock.mark`: a
  watermark of one of several producers on one of its shuffles; :meth:`StepClock.told`:
  the time of a single producer), tells it when records came and when it is idle, and
  sends the marks it says are due (:meth:`StepClock.outgoing`, :meth:`StepClock.tells_due`);
* the test driver: the piped records are one producer; after each record it tells
  every task of a step the producer's time (:meth:`StepClock.told`), as the engine's
  producer tells every queue of a shuffle after each batch;
* Spark's streaming replay: each replayed queue holds a :class:`StepClock` whose plan
  has one told input, the query's source order (one producer, both sides of a join
  included, as the driver's pipe); its records and *time rows* (another queue's record
  that raised that producer's time) tell it that time, a micro-batch at once
  (:meth:`StepClock.told_each`), and the window and join cores judge each row by what
  it returns.

So after a shuffle with several queues, a window closes before the end of input on
every backend once its producers' time passed it, whether or not its own queue gets a
later record (tests/pipelines/closing_count.py).

Inputs and their rules, as the plan says them:

* **marked** inputs (a shuffle with several producers, or feeding a join) carry a
  watermark from each producer after each of its batches; the input watermark
  (:attr:`StepClock.value`) is their minimum (:class:`InputWatermarks`: producers idle,
  or caught up with input files read to their end, leave it), per producer **and
  topic**: a task reads one topic's records, then the next's, so a producer's mark read
  on one shuffle says nothing of its records on another not read yet (the late records
  of several windowed steps merged make one task read each step's shuffle, all from
  the same producers);
* **told** inputs (a shuffle with one producer, read by a timed step) carry that
  producer's time: before a record more than the grace behind it, and after each batch
  to every queue the time moved on; several told inputs (a join of two topics) give
  their minimum;
* any other input (a user topic) bounds the task's own watermark by what it has sent
  (``out_time``), and may go idle (``idle_ms``) or be caught up (``reads_files``).

The clock does no per-record work: the engine calls it once per batch, per control
record and per punctuation, Spark's replay once per queue and micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Protocol

from rstreams.semantics.timing import NO_TIME

__all__ = [
    "END",
    "NO_TIME",
    "TIMED_KINDS",
    "ClockPlan",
    "InputWatermarks",
    "MarkedInput",
    "Positions",
    "Producer",
    "SourceProbe",
    "StepClock",
    "carries_time",
    "plan_clock",
    "producers_of",
    "task_count",
    "told_slack",
    "watermarked",
]

#: The watermark of an input that has ended.
END = 2**62
#: How often (wall ms) a task tells its consumers an unchanged watermark again.
RESEND_WATERMARK_MS = 10_000
#: How often a consumer looks again at the queues of producers that said they were
#: caught up (their input may have ended, or grown, since).
REFRESH_CAUGHT_UP_MS = 200

Producer = tuple[int, int]  # (sub-topology id, queue)
#: A marked input of a task: a producer on one shuffle topic it reads, ``(topic,
#: producer)``. A producer that writes several shuffles a task reads is one input per
#: topic: its watermark read on one says nothing of its records on another, not read
#: yet (the task reads one topic's records, then the next's).
MarkedInput = tuple[str, Producer]
#: The end positions a caught-up producer reached, per user source topic it reads.
Positions = tuple[tuple[str, int], ...]
#: A task's mark before it said anything: nothing a consumer needs told again.
_NOTHING_SENT: tuple[int, bool, None] = (NO_TIME, False, None)


class SourceProbe(Protocol):
    """What a consumer asks the broker about a caught-up producer's source queues."""

    def at_end(self, queries: Sequence[tuple[int, Positions]]) -> list[bool]:
        """For each (queue, positions): queue ``queue`` of each topic still ends at the
        position given (all in one question: on a networked broker, one round trip)."""

    def ingest_ended(self, caught_up: Sequence[tuple[int, Positions]]) -> bool:
        """For each (queue, positions): the ingest recorded that it reached the end of
        each topic's input file when the queue ended at the position given."""


def task_count(topology: Any, sub: Any, queue_count: Any) -> int:
    """Tasks of sub-topology ``sub``: one per queue of its widest source topic."""
    return max((queue_count(t) or 0) for t in sub.source_topics)


def producers_of(topology: Any, topic: str, queue_count: Any) -> list[Producer]:
    """Every task that writes shuffle topic ``topic``."""
    out: list[Producer] = []
    for sub in topology.subtopologies:
        if any(f.kind == "shuffle-sink" and f.topic == topic for f in sub.factories):
            out.extend((sub.id, q) for q in range(task_count(topology, sub, queue_count)))
    return out


#: The processor kinds that judge event time.
TIMED_KINDS = frozenset({"window-aggregate", "join"})


def carries_time(topology: Any, topic: str, queue_count: Any) -> bool:
    """Does shuffle topic ``topic`` carry control records: it has several producers, or
    one and a consumer that judges event time?"""
    if len(producers_of(topology, topic, queue_count)) > 1:
        return True
    return any(
        f.kind in TIMED_KINDS for sub in topology.subtopology_of_topic(topic) for f in sub.factories
    )


def watermarked(topology: Any, topic: str, queue_count: Any) -> bool:
    """Does shuffle topic ``topic`` carry watermark control records (sent after each
    processed batch)? When it has several producers, and when it feeds a join: a
    producer's batch reaches a join one side after the other (each branch of the batch
    in turn), so a time told before a record would run ahead of the other side's
    records of the same batch (a windowed join would then expire, or take for late,
    what the other side still has to match); a watermark sent after the whole batch
    does not."""
    if len(producers_of(topology, topic, queue_count)) > 1:
        return True
    return any(
        f.kind == "join" for sub in topology.subtopology_of_topic(topic) for f in sub.factories
    )


def told_slack(topology: Any, topic: str) -> int:
    """How far behind its producer's time a record sent to ``topic`` may be without
    its queue being told that time first (see :func:`send_told`): the smallest grace of
    the windowed aggregations reading it. A record at most that far behind updates the
    same windows and sessions whether its consumer's time is the producer's or its own
    records' (a window of the record ends after it, so it closes after ``ts + grace``;
    a session it can join ends at ``ts - gap`` or later, so it closes after ``ts +
    grace`` too: :meth:`WindowCore.close_time <rstreams.semantics.windows.WindowCore.close_time>`);
    only the moment a window closes moves, up to the end of the batch, where the queue
    is told. 0 (tell every record behind) where a step between the shuffle and the
    window may change timestamps, or a join reads it."""
    slack: int | None = None
    for sub in topology.subtopology_of_topic(topic):
        for f in sub.factories:
            if f.kind in ("selectTimestamp", "join"):
                return 0
            if f.kind != "window-aggregate":
                continue
            grace = int(f.node.window.grace)
            slack = grace if slack is None else min(slack, grace)
    return slack or 0


class InputWatermarks:
    """The watermarks a task has received, per marked input: per producer and shuffle
    topic (:data:`MarkedInput`; a bare :data:`Producer` given is one on topic ``""``).

    :attr:`value` is their minimum over the inputs not idle (and not caught up, see
    the module docstring). Once every producer has ended (or is idle), it is the largest
    watermark any of them sent before that: the largest timestamp of the input, which is
    where one queue's stream time would be. Without producers it is :data:`END`: nothing
    bounds the task's time from outside. It never goes back.
    """

    __slots__ = ("caught_up", "idle", "marks", "probe", "top", "value")

    def __init__(
        self, inputs: Iterable[MarkedInput | Producer], probe: SourceProbe | None = None
    ) -> None:
        keys = [k if isinstance(k[0], str) else ("", k) for k in inputs]
        self.marks: dict[MarkedInput, int] = dict.fromkeys(keys, NO_TIME)
        self.idle: set[MarkedInput] = set()
        #: Inputs idle because their producer read all its input, with the positions.
        self.caught_up: dict[MarkedInput, Positions] = {}
        self.probe = probe
        self.top = NO_TIME  # the largest watermark received short of END
        self.value = NO_TIME if keys else END

    def update(
        self,
        producer: Producer,
        watermark: int,
        idle: bool,
        high: int = NO_TIME,
        caught_up: Positions | None = None,
        topic: str = "",
    ) -> bool:
        """Note a control record of ``producer`` on ``topic``; True if :attr:`value`
        changed. A producer's watermark never goes back (a restarted producer may
        resend an older one)."""
        key = (topic, producer)
        if key not in self.marks:
            return False  # not a producer of ours (e.g. a topology since changed)
        if high < END and high > self.top:
            self.top = high
        if watermark > self.marks[key]:
            self.marks[key] = watermark
            if watermark < END and watermark > self.top:
                self.top = watermark
        self.caught_up.pop(key, None)
        self.idle.discard(key)
        if caught_up is not None and self.probe is not None:
            self.caught_up[key] = caught_up
        elif idle:
            self.idle.add(key)
        return self.refresh()

    def refresh(self) -> bool:
        """Compute :attr:`value` again (caught-up producers' queues may have grown or
        their input ended since); True if it changed."""
        value = self._minimum()
        if value >= END:
            value = self.top
        if value <= self.value:
            return False
        self.value = value
        return True

    def _minimum(self) -> int:
        if not self.caught_up:
            return min((w for p, w in self.marks.items() if p not in self.idle), default=END)
        probe = self.probe
        assert probe is not None
        # Per topic, the producers of each sub-topology: the tasks of one input.
        groups: dict[tuple[str, int], list[MarkedInput]] = {}
        for p in self.marks:
            groups.setdefault((p[0], p[1][0]), []).append(p)
        asked = [p for p in self.marks if p not in self.idle and self.caught_up.get(p) is not None]
        ended = dict(
            zip(asked, probe.at_end([(p[1][1], self.caught_up[p]) for p in asked]), strict=True)
        )
        value = END
        for members in groups.values():
            held: list[int] = []  # the watermarks of members that hold time back
            at_end: list[MarkedInput] = []  # caught up, and their queues still end there
            awake = 0
            for p in members:
                if p in self.idle:
                    continue
                awake += 1
                positions = self.caught_up.get(p)
                if positions is not None and ended[p]:
                    at_end.append(p)
                    if len(positions) == 1:
                        continue  # one input, read in order: nothing of it is behind
                held.append(self.marks[p])
            if at_end and len(at_end) == awake:
                # All of this input is read: it holds nothing back. Unless it never gave
                # a record: an input not started yet (an empty file, followed) holds
                # time back, or a join would drop everything its other side buffered.
                started = any(self.marks[p] > NO_TIME for p in at_end)
                ended_at = [(p[1][1], self.caught_up[p]) for p in at_end]
                if started and probe.ingest_ended(ended_at):
                    continue
                if not held:
                    # Every queue read, but the ingest has not reached the end of the
                    # input yet: time is where the input got.
                    value = min(value, max(self.marks[p] for p in at_end))
                    continue
            if held:
                value = min(value, *held)
        return value


# -- the plan ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClockPlan:
    """What a task's :class:`StepClock` follows, worked out once per task from the
    topology and the queue counts (:func:`plan_clock`). Plain data: the planner knows
    the shuffles' queue counts but not the sources' (the broker's), so the backends
    build it where they know both.

    ``producer``: the task, as its consumers name it, ``(sub-topology id, queue)``.
    ``marked``: inputs whose producers send watermarks (``producers``: each producer
    of each, as ``(topic, producer)``: one producer's watermark read on one topic does
    not count for the others).
    ``told``: inputs whose single producer tells its time.
    ``outputs``: ``(topic, queues)`` this task sends its watermark to.
    ``tells``: ``(topic, queues, slack)`` this task tells its time to (see
    :func:`told_slack`); only a task that reads no watermarks tells.
    ``sources``: every input topic; ``reads_files``: all are input files read in order
    (caught up once read to their end); ``idle_ms``: its user inputs go idle after
    that long without a record (None: never).
    """

    producer: Producer
    sources: tuple[str, ...] = ()
    marked: frozenset[str] = frozenset()
    producers: tuple[MarkedInput, ...] = ()
    told: tuple[str, ...] = ()
    outputs: tuple[tuple[str, int], ...] = ()
    tells: tuple[tuple[str, int, int], ...] = ()
    reads_files: bool = False
    idle_ms: int | None = None

    @property
    def unmarked_input(self) -> bool:
        """Some input carries no watermark: what the task sends bounds its own."""
        return len(self.marked) < len(self.sources)


def plan_clock(
    topology: Any,
    sub: Any,
    queue: int,
    sources: Iterable[str],
    queue_count: Callable[[str], int | None],
    *,
    watermarks: bool = True,
    reads_files: bool = False,
    idle_ms: int | None = None,
) -> ClockPlan:
    """The plan of the task of ``sub`` (a planner sub-topology) on ``queue``, reading
    ``sources``. ``watermarks=False`` (the test driver, which tells time itself): no
    control records in or out."""
    sources = tuple(sources)
    marked: set[str] = set()
    told: list[str] = []
    producers: list[MarkedInput] = []
    for topic in sources if watermarks else ():
        if topology.topics[topic].role != "shuffle":
            continue
        if watermarked(topology, topic, queue_count):
            marked.add(topic)
            producers += ((topic, p) for p in producers_of(topology, topic, queue_count))
        elif carries_time(topology, topic, queue_count):
            told.append(topic)
    outputs: list[tuple[str, int]] = []
    tells: list[tuple[str, int, int]] = []
    for f in sub.factories if watermarks else ():
        if f.kind != "shuffle-sink" or f.topic is None:
            continue
        entry = (f.topic, queue_count(f.topic) or 0)
        if watermarked(topology, f.topic, queue_count):
            if entry not in outputs:
                outputs.append(entry)
        elif not marked and carries_time(topology, f.topic, queue_count):
            # Only to a shuffle it alone feeds: several producers' consumers take a
            # control record for a watermark (nothing older follows), which a told time
            # is not; theirs come after each batch (outputs).
            tells.append((*entry, told_slack(topology, f.topic)))
    return ClockPlan(
        (sub.id, queue), sources, frozenset(marked), tuple(producers), tuple(told),
        tuple(outputs), tuple(tells), reads_files, idle_ms,
    )  # fmt: skip


# -- the clock -----------------------------------------------------------------------------


class StepClock:
    """The stream time of one task: what its timed steps judge by, and what it tells
    its consumers. Built from its :class:`ClockPlan`; ``now`` is the wall clock (ms) at
    the start; ``probe`` answers questions about caught-up producers' source queues
    (None: caught-up producers are not followed); ``restored``: (the largest timestamp
    sent, the largest watermark or time sent short of END) as of an earlier owner's
    last commit (only the second is the clock's: the first is the task's ``out_time``).

    Interface (each called per batch, control record or punctuation, never per record):

    * :meth:`mark` / :meth:`told`: a control record of a marked / told input;
    * :meth:`input_came`: records of an unmarked input came (not idle any more);
    * :meth:`punctuate`: wall-clock time passed (idle, caught up, caught-up producers'
      queues looked at again);
    * :meth:`end`: bounded input is over;
    * :attr:`value`: the input watermark (END: no input carries one);
      :meth:`watermark`: the task's own;
    * :meth:`outgoing`, :meth:`tells_due`, :meth:`tell`: the marks to send.
    """

    def __init__(
        self,
        plan: ClockPlan,
        now: int,
        probe: SourceProbe | None = None,
        restored: tuple[int, int] = (NO_TIME, NO_TIME),
    ) -> None:
        self.plan = plan
        self.marks = InputWatermarks(list(plan.producers), probe)
        #: Per told input, the latest time it told (used when there are several).
        self.told_times: dict[str, int] = {}
        self.ended = False
        self.idle = False
        #: The positions this task was idle at because it had read all its input.
        self.caught_up: Positions | None = None
        #: The largest watermark or time sent short of END (as of ``restored``).
        self.high = restored[1]
        self.last_input = self.refreshed_at = self.sent_at = now
        self.sent_mark: tuple[int, bool, Positions | None] = _NOTHING_SENT
        self._told: dict[tuple[str, int], int] = {}

    @property
    def value(self) -> int:
        """The input watermark: the minimum over the marked inputs' producers; END when
        no input carries one (then the timed steps judge by the largest timestamp they
        have seen, raised by :meth:`told`)."""
        return self.marks.value

    def watermark(self, out_time: int) -> int:
        """The task's own watermark, ``out_time`` being the largest timestamp it has
        sent: nothing it sends from now on is older (END once its input is over)."""
        if self.ended:
            return END
        wm = self.marks.value
        if self.plan.unmarked_input and out_time < wm:
            return out_time
        return wm

    # -- what comes in ------------------------------------------------------------------

    def mark(
        self,
        producer: Producer,
        watermark: int,
        idle: bool,
        high: int,
        caught_up: Positions | None,
        topic: str = "",
    ) -> bool:
        """A watermark control record of ``producer`` read on marked input ``topic``;
        True if :attr:`value` moved."""
        return self.marks.update(producer, watermark, idle, high, caught_up, topic)

    def told(self, topic: str, time: int, high: int = NO_TIME) -> int:
        """A told input's producer told ``time`` (END with ``high``: it ended, having
        got to ``high``). Returns the time the timed steps have reached by it: this
        one (they keep the largest themselves, as their ``max_time``), or with several
        told inputs their minimum once each has told one. The clock keeps the largest
        each input told (:attr:`told_time`)."""
        if time >= END:
            time = high
        told = self.told_times
        if time > told.get(topic, NO_TIME):
            told[topic] = time
        if len(self.plan.told) <= 1:
            return time
        return min(told.get(t, NO_TIME) for t in self.plan.told)

    def told_each(self, topic: str, times: Sequence[int]) -> list[int]:
        """Told each of ``times`` in turn (none END), in one call: the time the timed
        steps have reached after each, the largest the input told so far (or with
        several told inputs, the minimum of theirs). A replay that knows a batch of its
        producer's times at once (Spark's: a queue's records and time rows of a
        micro-batch, in source order) asks once per batch, not once per record."""
        start = self.told_times.get(topic, NO_TIME)
        reached = list(accumulate(times, max, initial=start))
        del reached[0]
        if not reached:
            return reached
        self.told_times[topic] = reached[-1]
        if len(self.plan.told) <= 1:
            return reached
        others = min(self.told_times.get(t, NO_TIME) for t in self.plan.told if t != topic)
        return [min(t, others) for t in reached]

    @property
    def told_time(self) -> int:
        """The time the told inputs have reached (their minimum); NO_TIME before each
        has told one, or without told inputs."""
        if not self.plan.told:
            return NO_TIME
        return min(self.told_times.get(t, NO_TIME) for t in self.plan.told)

    def input_came(self, now: int) -> None:
        """Records of an input without watermarks came: the task is not idle."""
        self.last_input = now
        self.idle = False
        self.caught_up = None

    def punctuate(self, now: int, lag: Callable[[], int], positions: Positions) -> bool:
        """Wall-clock time passed: a task that read all its input files is caught up
        (at ``positions``), one whose inputs gave nothing for ``idle_ms`` is idle
        (``lag``: its input records not read yet, asked only when needed); caught-up
        producers' queues are looked at again. True if :attr:`value` moved."""
        plan = self.plan
        if plan.reads_files and not self.idle and not self.ended and not lag():
            # Read all it was given: hold nothing back while the queues end there.
            self.idle = True
            self.caught_up = positions
        elif (
            plan.idle_ms is not None
            and plan.unmarked_input
            and (not self.idle or self.caught_up is not None)
            and now - self.last_input >= plan.idle_ms
            and not lag()
        ):
            self.idle = True  # stop holding the watermark back until input comes
            self.caught_up = None
        if self.marks.caught_up and now - self.refreshed_at >= REFRESH_CAUGHT_UP_MS:
            # A caught-up producer's queue may have grown, or its input ended.
            self.refreshed_at = now
            return self.marks.refresh()
        return False

    def end(self) -> None:
        """Bounded input is over: the task's watermark is END."""
        self.ended = True

    # -- what goes out -------------------------------------------------------------------

    def outgoing(
        self, out_time: int, now: int, holding: bool = False, again: bool = False
    ) -> tuple[int, bool, int, Positions | None] | None:
        """The watermark mark to send to ``plan.outputs`` now, ``(watermark, idle,
        high, caught_up)``, or None: nothing moved (unless ``again``: a consumer
        restarted since has lost it), or a processor is ``holding`` records back (they
        go first, at commit), or END was sent (final: nothing more is news)."""
        if not self.plan.outputs or self.sent_mark[0] >= END:
            return None
        mark = (self.watermark(out_time), self.idle, self.caught_up)
        if (mark == self.sent_mark and not again) or (holding and not self.ended):
            return None
        self.sent_mark = mark
        self.sent_at = now
        if mark[0] < END and mark[0] > self.high:
            self.high = mark[0]
        return mark[0], mark[1], self.high, mark[2]

    def resend_due(self, now: int) -> bool:
        """An unchanged mark is due again (consumers restarted since have lost it; that
        includes one with no time but idle or caught up, or a consumer's new owner would
        wait for that producer forever)."""
        return self.sent_mark != _NOTHING_SENT and now - self.sent_at >= RESEND_WATERMARK_MS

    def tell(self, topic: str, queue: int, time: int) -> int | None:
        """Queue ``queue`` of told output ``topic`` is to be told ``time`` (before a
        record behind it): the ``high`` to send with it, or None if it knows already."""
        if self._told.get((topic, queue), NO_TIME) >= time:
            return None
        self._told[(topic, queue)] = time
        if time > self.high:
            self.high = time
        return self.high

    def tells_due(self, times: Mapping[str, int]) -> list[tuple[str, int, int, int]]:
        """After a batch: ``(topic, queue, time, high)`` for every queue of the told
        outputs that has not been told the task's time there (``times``: per told
        topic, the largest timestamp the task sent to it): a queue whose records stopped
        still learns its producer's time, and closes what that time passed before the
        end of input, as the producer's other queues do. What that time closes no record
        that is not late can change, even one at that time itself coming later to that
        queue (a session ending ``gap`` before it closes only once time passes its end +
        gap + grace): ties do not decide, so where batches end does not either."""
        due: list[tuple[str, int, int, int]] = []
        for topic, queues, _ in self.plan.tells:
            time = times.get(topic, NO_TIME)
            if time <= NO_TIME:
                continue
            for q in range(queues):
                high = self.tell(topic, q, time)
                if high is not None:
                    due.append((topic, q, time, high))
        return due
