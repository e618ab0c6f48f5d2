"""Operators: what a task's processor chain is made of (phase 3 of the build).

Records and columnar batches, the processors of every step (maps, filters, fused runs
of built-ins, keyed aggregations, windows, joins), the sinks (user sinks and shuffle
sinks), the registry that builds them from the planner's factories, the
:class:`~rstreams.runtime.engine.operators.context.StreamContext` a processor reaches,
the producer its writes go through, and the watermark control records a shuffle
carries. A change to what a step computes, or how a batch flows through it, belongs
here. Imports no other package of the engine.
"""
