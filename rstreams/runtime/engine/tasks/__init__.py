"""Tasks: one sub-topology on one queue, its state and its commit.

The task (build, process, commit), its identity and lifecycle, the restore of its
stores from their changelogs, the exactly-once commit and its transaction record, the
end of input of a bounded run and the trimming of consumed records. A change to the
commit protocol, to recovery or to what a task does between batches belongs here.
Imports only :mod:`~rstreams.runtime.engine.operators` of the engine.
"""
