"""The live view of a running job: ``rstreams top`` and ``rstreams run --live``.

It reads only what a running job already leaves under its data directory, so it works
from another terminal (or machine sharing the directory) while the job runs:

- the statistics the supervisor and each worker publish about once a second under
  ``<data-dir>/<job>/coordination/<job>/stats/`` (records in and out, per step counts,
  per queue positions, state stores, commit latencies, late and skipped records, errors);
- the consumer group's files: members, generation and which member holds which task;
- the restore progress files of tasks rebuilding their state;
- committed offsets and log ends, read through the broker (the lag of each queue);
- the topology tree the supervisor publishes as data, to draw it (never the pipeline file
  the statistics name: that would run code chosen by whoever can write the directory;
  ``rstreams top --pipeline FILE`` loads a file the user names).

:func:`snapshot` gathers all that into a :class:`LiveSnapshot` (plain data);
:func:`render` turns a snapshot (and the one before it, for records per second) into a
``rich`` renderable; :func:`plain_line` into one line of text for logs;
:func:`run_top` refreshes either on a terminal until Ctrl-C.

The package has a module per role: :mod:`~rstreams.live.snapshot` gathers,
:mod:`~rstreams.live.render` draws, :mod:`~rstreams.live.terminal` refreshes a terminal
(``rstreams top``, and the progress of ``rstreams run``).

>>> import io, tempfile
>>> from rstreams.runtime.layout import JobLayout
>>> from rich.console import Console
>>> data = tempfile.mkdtemp()
>>> JobLayout.of(data, "wordcount").log.mkdir(parents=True)
>>> snap = snapshot(data, "wordcount")
>>> snap.job, snap.supervisor, snap.workers
('wordcount', None, ())
>>> plain_line(snap, None)
'wordcount: no statistics yet (is the job running?); generation 0, 0 members'
>>> console = Console(file=io.StringIO(), width=100, color_system=None)
>>> console.print(render(snap, None))
>>> "job wordcount" in console.file.getvalue()
True
"""

from __future__ import annotations

from rstreams.live.render import plain_line, render
from rstreams.live.snapshot import (
    LiveSnapshot,
    QueueRow,
    StepNode,
    SubTopologyNode,
    list_jobs,
    pick_job,
    snapshot,
)
from rstreams.live.terminal import LiveRunView, RunProgress, add_parsers, progress_text, run_top

__all__ = [
    "LiveRunView",
    "LiveSnapshot",
    "QueueRow",
    "RunProgress",
    "StepNode",
    "SubTopologyNode",
    "add_parsers",
    "list_jobs",
    "pick_job",
    "plain_line",
    "progress_text",
    "render",
    "run_top",
    "snapshot",
]
