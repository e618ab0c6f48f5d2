"""A job remembers the topology it last ran with, and refuses one that would lose state.

Step, topic and store names follow a step's place in its chain, so an edit upstream of
an aggregation renames its store: a resumed job would start that store empty and never
read the old one again (or, with another serde, window or queue count under the same
name, read it wrongly). Before a run of the embedded runtime starts, the supervisor
calls :func:`check_topology`: it compares the topology with the one the job's directory
recorded (``<data dir>/<job id>/topology.json``) and raises
:class:`~rstreams.planner.diff.TopologyChangeError`, with the diff, when the change
would lose or misread state, unless the run allows it; then it records the new one.

A change that loses nothing may still leave state *stale* (see
:mod:`rstreams.planner.diff`): a step before a kept store or sink topic computes
differently now, but a resumed job does not read the input it already consumed again,
so the change applies to new input only. :func:`stale_at_start` and
:func:`stale_at_end` say so when such a run starts and when it ends (the end matters
most when the run had no new input: its table is wholly the earlier version's).

    >>> import tempfile
    >>> from pathlib import Path
    >>> from rstreams import StreamBuilder
    >>> def wordcount(lowercase: bool):
    ...     b = StreamBuilder("wc")
    ...     words = b.source("lines").flatMap(str.split)
    ...     if lowercase:
    ...         words = words.map(str.lower)
    ...     words.keyBy(str).count().sink("counts")
    ...     return b.build()
    >>> job = Path(tempfile.mkdtemp()) / "wc"
    >>> check_topology(job, wordcount(False))  # the first run: recorded
    >>> check_topology(job, wordcount(True))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rstreams.planner.diff.TopologyChangeError: job 'wc' last ran with another topology...
    >>> check_topology(job, wordcount(True), allow=True).loses_state  # recorded anyway
    True
    >>> check_topology(job, wordcount(True))  # the new one is the job's topology now
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rstreams.planner.diff import (
    TopologyChangeError,
    TopologyDiff,
    TopologyIdentity,
    diff,
    identity,
)
from rstreams.planner.topology import Topology
from rstreams.runtime.layout import TOPOLOGY_FILE, JobLayout
from rstreams.runtime.queues._files import _atomic_write

__all__ = [
    "TOPOLOGY_FILE",
    "JoinMismatchError",
    "check_joined_topology",
    "check_topology",
    "publish_topology",
    "stale_at_end",
    "stale_at_start",
    "topology_key",
]

log = logging.getLogger("rstreams.supervisor")


def check_topology(
    job_dir: str | os.PathLike[str],
    topology: Topology,
    *,
    allow: bool = False,
    fresh: bool = False,
    start_over: str = "--fresh",
) -> TopologyDiff | None:
    """Compare ``topology`` with the one job directory ``job_dir`` last ran with, refuse
    a change that would lose or misread state (unless ``allow``), and record it.

    ``fresh`` (the job starts over, its directory is empty) records without comparing.
    ``start_over``: how a user starts the job over, for the messages (``--fresh``; on
    Spark, a new checkpoint).
    Returns the diff when there was an earlier topology that differs, else None.
    """
    path = JobLayout(job_dir, topology.job_id).topology
    current = identity(topology)
    found: TopologyDiff | None = None
    if not fresh and path.exists():
        try:
            saved = TopologyIdentity.from_json(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            if not allow:
                raise TopologyChangeError(
                    f"job {topology.job_id!r} can not tell whether its topology changed: "
                    f"{path} is unreadable ({e}); run with --allow-topology-change if this "
                    f"pipeline is the one the job ran with, or {start_over} to start the job over"
                ) from e
            log.warning("%s is unreadable (%s); recording this run's topology", path, e)
        else:
            found = saved_diff = diff(saved, current, start_over=start_over)
            if saved_diff.loses_state and not allow:
                raise TopologyChangeError(_refusal(topology.job_id, path, saved_diff, start_over))
            if saved_diff.loses_state:
                log.warning(
                    "job %r runs with a changed topology (--allow-topology-change):\n%s",
                    topology.job_id,
                    saved_diff.describe(),
                )
            elif not saved_diff.unchanged:
                log.info(
                    "job %r: the topology changed without losing state:\n%s",
                    topology.job_id,
                    saved_diff.describe(),
                )
            else:
                found = None
            if saved_diff.uncompared:  # (said, not counted unchanged: see the diff)
                log.info(
                    "job %r: not compared with its last run: %s",
                    topology.job_id,
                    "; ".join(saved_diff.uncompared),
                )
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, current.to_json().encode(), sync=True)
    return found


def _refusal(job: str, path: Path, d: TopologyDiff, start_over: str) -> str:
    return (
        f"job {job!r} last ran with another topology ({path}), and this one would lose "
        f"or misread its state:\n\n{d.describe()}\n{_what_to_do(d, start_over)}"
    )


#: A misread store's or topic's note (by its first word) -> what it was written with.
_WRITTEN_WITH = {
    "window": "other window bounds",
    "queues": "another queue count (keys on other queues)",
    "serde": "another serde",
    "key_serde": "another key serde",
    "value_serde": "another value serde",
    "aggregation": "another aggregation",
    "split": "its keys split by another topic",
}


def _what_to_do(d: TopologyDiff, start_over: str) -> str:
    """The refusal's last line: why the change loses or misreads state, in the terms of
    the change (a rename: name=; a resized window: other window bounds...), and what to
    do about it."""
    # A store lost with its step's generated name (not because the job id changed).
    renamed = d.old_job == d.new_job and any(
        c.effect == "lost" and c.status == "renamed" for c in d.stores
    )
    written: dict[str, list[str]] = {}  # what they were written with -> stores, topics
    for what, changes in (("store", d.stores), ("topic", d.topics)):
        for c in changes:
            if c.effect != "misread":
                continue
            whys = [
                why
                for note in c.notes
                if (why := _WRITTEN_WITH.get(note.split(":")[0].split(" ")[0])) is not None
            ]
            with_ = _and(list(dict.fromkeys(whys))) if whys else "other settings"
            written.setdefault(with_, []).append(f"{what} {c.new}")
    misread = [
        f"{_and(names)} {'was' if len(names) == 1 else 'were'} written with {with_}"
        for with_, names in written.items()
    ]
    lost = "orphaned state stays unused"
    if renamed and not misread:
        return (
            "Keep the state by giving the renamed steps their old names with name= (as the "
            f"hints above say; docs/concepts.md#step-names), start the job over with "
            f"{start_over}, or run anyway with --allow-topology-change ({lost})"
        )
    if not misread:  # the job id changed
        return (
            f"Keep the job id (as the hints above say), start the job over with {start_over}, "
            f"or run anyway with --allow-topology-change ({lost})"
        )
    consequence = "what was written with the old settings is then read with the new ones"
    keep = ""
    if renamed:
        keep = (
            "Keep the state of the renamed steps by giving them their old names with name= "
            "(as the hints above say; docs/concepts.md#step-names); "
        )
        consequence = f"{lost}, and {consequence}"
    said = (
        f"{keep}{'; '.join(misread)}: start the job over with {start_over} (or give it a new "
        f"job id) to build it anew, or run anyway with --allow-topology-change ({consequence})"
    )
    return said[:1].upper() + said[1:]


def _what(d: TopologyDiff) -> tuple[str, str]:
    """(``topic T and store S``, ``A added, B changed``) of a stale diff."""
    stale = d.stale_changes
    names = [f"{'topic' if c.kind == 'sink' else 'store'} {c.new}" for c in stale]
    causes = dict.fromkeys(cause for c in stale for cause in c.causes)
    return _and(names), ", ".join(causes)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _s(verb: str, d: TopologyDiff) -> str:
    return verb if len(d.stale_changes) > 1 else f"{verb}s"


def stale_at_start(
    job: str, d: TopologyDiff, inputs: list[str], unread: list[str], start_over: str = "--fresh"
) -> str:
    """What a resumed run with a stale change says at its start; ``unread`` are the
    ``inputs`` that still have lines the job has not read."""
    held, causes = _what(d)
    if not unread:
        return (
            f"job {job!r} resumes with a changed pipeline ({causes}) and no new input: "
            f"{_and(inputs)} {'was' if len(inputs) == 1 else 'were'} consumed by an earlier "
            "run and not read again, so no record will go through the changed steps; "
            f"{held} {_s('keep', d)} what the "
            f"earlier version computed. Run with {start_over} to recompute from all input with "
            "this version"
        )
    return (
        f"job {job!r} resumes with a changed pipeline ({causes}): the change applies to "
        f"new input only (the rest of {_and(unread)}); input consumed by earlier runs "
        f"is not read again, and what {held} {_s('hold', d)} from it is what the earlier "
        f"version computed. Run with {start_over} to recompute from all input with this version"
    )


def stale_at_end(
    d: TopologyDiff, records_in: int, inputs: list[str], start_over: str = "--fresh"
) -> str:
    """What a run with a stale change says at its end, after ``records_in`` new input
    records from ``inputs``."""
    held, causes = _what(d)
    if not records_in:
        return (
            f"no new input: {_and(inputs)} {'was' if len(inputs) == 1 else 'were'} already "
            "consumed by an earlier run, so "
            f"the output is the table the earlier version of the pipeline computed ({held}), "
            f"not what this version computes ({causes}). Run with {start_over} to recompute it "
            "from all input"
        )
    return (
        f"only the {records_in:,} new input record(s) went through the changed pipeline "
        f"({causes}): {held} also {_s('hold', d)} what the earlier version computed from the "
        f"input consumed before. Run with {start_over} to recompute all of it with this "
        "version"
    )


# -- hosts joining a run (Redis) ------------------------------------------------------------


def topology_key(job: str) -> str:
    """The Redis key where the run that owns job ``job`` records its topology's identity
    (steps, topics, stores and the code identity of every user function) for the hosts
    that join it."""
    return f"rs:{{{job}}}:topology"


def publish_topology(client: Any, topology: Topology) -> None:
    """Record ``topology`` as the one the job runs now (by the run holding its lock)."""
    client.set(topology_key(topology.job_id), identity(topology).to_json())


class JoinMismatchError(TopologyChangeError):
    """``rstreams run --join`` with a pipeline other than the one the joined run runs
    (exit 2, with the diff)."""


#: Seconds a joining run waits for a run that just took the job lock to record its
#: topology.
RECORD_WAIT_S = 30.0


def check_joined_topology(
    client: Any, topology: Topology, holder: Callable[[], dict[str, Any] | None]
) -> None:
    """Refuse (:class:`JoinMismatchError`) to join a run whose topology, or the code of
    any of its steps, differs from ``topology``: its workers would compute other answers
    on this host's tasks (or wait forever for topics the other never fills). ``holder``:
    who holds the job lock now (None once the run is gone)."""
    job = topology.job_id
    deadline = time.monotonic() + RECORD_WAIT_S
    while (raw := client.get(topology_key(job))) is None:
        if holder() is None or time.monotonic() > deadline:
            raise JoinMismatchError(
                f"the run of job {job!r} records no topology for hosts that join it (it "
                "is gone, or runs an older rstreams): run the same rstreams version on "
                "every host"
            )
        time.sleep(0.1)
    try:
        theirs = TopologyIdentity.from_json(raw.decode() if isinstance(raw, bytes) else raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise JoinMismatchError(
            f"the topology the run of job {job!r} recorded ({topology_key(job)}) is "
            f"unreadable ({e}); stop that run and start it again"
        ) from e
    d = diff(theirs, identity(topology))
    if d.unchanged:
        if d.uncompared:  # (values both hosts must hold alike, which nothing can check)
            log.warning(
                "joining job %r: these can not be compared with the run's, make sure this "
                "host has the same: %s",
                job,
                "; ".join(d.uncompared),
            )
        return
    who = holder() or {}
    raise JoinMismatchError(
        f"--join: this pipeline is not the one job {job!r} runs (host {who.get('host', '?')}, "
        f"pid {who.get('pid', '?')}); from that run's pipeline to this one:\n"
        f"{d.describe().rstrip()}\n"
        "join with the same pipeline file, and the same code it reads, as that run"
    )
