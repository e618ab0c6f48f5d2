"""Coordination: the processes of a run and how they agree.

The supervisor of ``rstreams run``, the worker process and the pool that spawns and
restarts workers, their launch and exit reports, ``--join`` for other hosts, the
in-process engine (:class:`~rstreams.runtime.engine.coordination.local.LocalEngine`),
live statistics, riding out a broker outage and collecting the results. A change to
who runs what, rebalancing, restarts or what a run reports belongs here. May import
every other package of the engine; none imports it.
"""
