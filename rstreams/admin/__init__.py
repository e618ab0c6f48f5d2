"""Commands that look at and feed the embedded runtime's log: topics, produce, consume,
offsets, group and state. They work on the log of one job: ``DATA_DIR/JOB``, or with
``--broker URL`` the job's keys in Redis (:mod:`rstreams.brokeropts`). ``--job`` may be
left out when the data directory (or database) holds a single job, or when only one of
its jobs has what the command names (the topic, group or store).

The modules, by what they hold:

- :mod:`~rstreams.admin.parsers`: the commands' parsers (:func:`add_parsers`);
- :mod:`~rstreams.admin.access`: which job a command works on, and its checks of
  ``--data-dir`` and of topic names;
- :mod:`~rstreams.admin.topics`: ``topics list``, ``create`` and ``describe``;
- :mod:`~rstreams.admin.repair`: ``topics check`` and ``topics repair`` (the file log);
- :mod:`~rstreams.admin.records`: ``produce`` and ``consume``;
- :mod:`~rstreams.admin.groups`: ``offsets`` and ``group describe``;
- :mod:`~rstreams.admin.stores`: ``state``;
- :mod:`~rstreams.admin.formatting`: what they print (records, lag tables).
"""

from __future__ import annotations

from rstreams.admin.access import job_root
from rstreams.admin.formatting import lag_rows
from rstreams.admin.groups import cmd_group, cmd_offsets
from rstreams.admin.parsers import add_parsers
from rstreams.admin.records import cmd_consume, cmd_produce
from rstreams.admin.stores import cmd_state
from rstreams.admin.topics import cmd_topics

__all__ = [
    "add_parsers",
    "cmd_consume",
    "cmd_group",
    "cmd_offsets",
    "cmd_produce",
    "cmd_state",
    "cmd_topics",
    "job_root",
    "lag_rows",
]
