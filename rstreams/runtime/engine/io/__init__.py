"""Records into and out of the job's topics, beside the processor chains.

The ingest of input files into the source topics, Redis streams other programs own
(external sources and sinks), and the pulling agents with their queue cache that feed
tasks. A change to how input is read, resumed or pulled belongs here. Imports
:mod:`~rstreams.runtime.engine.operators` and :mod:`~rstreams.runtime.engine.tasks`,
never coordination.
"""
