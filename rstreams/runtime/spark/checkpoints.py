"""The topology guard of a streaming run's checkpoint: a checkpoint resumed with other
code mixes both versions' answers, so the run compares its topology with the one the
checkpoint last ran with, as the embedded runtime does with its data directory."""

from __future__ import annotations

import logging
from pathlib import Path

from rstreams.config import RunConfig
from rstreams.planner.diff import TopologyDiff
from rstreams.planner.topology import Topology
from rstreams.runtime.layout import JobLayout
from rstreams.runtime.spark.tables import is_local, local_path
from rstreams.runtime.topology_guard import check_topology, stale_at_end, stale_at_start

log = logging.getLogger("rstreams.spark")


#: How a streaming job starts over (the messages of the topology guard).
NEW_CHECKPOINT = "a new --checkpoint directory"


def guard_checkpoint(
    topology: Topology, checkpoint: str | None, inputs: dict[str, str], config: RunConfig | None
) -> TopologyDiff | None:
    """Compare ``topology`` (steps, stores and the code identity of every function, with
    what it reads) with the one the checkpoint of a streaming run last ran with, as the
    embedded runtime does with its data directory: refuse a change that loses or misreads
    state (TopologyChangeError, exit 2) unless ``--allow-topology-change``, warn about one
    that leaves it stale, and record it. Returns the stale change (for the warning at the
    end), else None (also without a checkpoint: a batch run)."""
    if checkpoint is None:
        return None
    if not is_local(checkpoint):
        log.warning(
            "the checkpoint %s is not on a local disk: a change of the pipeline's code "
            "between runs on it is not detected (both versions' answers would mix); keep "
            "one checkpoint per version of the pipeline",
            checkpoint,
        )
        return None
    root = local_path(checkpoint)
    allow = bool(config and config.allow_topology_change)
    layout = JobLayout(root, topology.job_id)
    unrecorded = not layout.topology.exists() and Path(root).is_dir() and any(Path(root).iterdir())
    if unrecorded:
        # A checkpoint from before the topology was recorded next to it: nothing to
        # compare with; record it from now on.
        log.warning(
            "the checkpoint %s has no record of the pipeline it ran with (an earlier "
            "rstreams): recording this one; a change made since is not detected",
            checkpoint,
        )
    change = check_topology(root, topology, allow=allow, start_over=NEW_CHECKPOINT)
    if change is None or not change.stale:
        return None
    paths = list(inputs.values())
    log.warning("%s", stale_at_start(topology.job_id, change, paths, paths, NEW_CHECKPOINT))
    return change


def stale_at_checkpoint_end(
    change: TopologyDiff | None, records_in: int, inputs: dict[str, str]
) -> None:
    """The warning at the end of a run that resumed a checkpoint with a stale change."""
    if change is not None:
        paths = list(inputs.values())
        log.warning("%s", stale_at_end(change, records_in, paths, NEW_CHECKPOINT))
