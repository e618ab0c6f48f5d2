"""The embedded engine's processor registry: factory kind -> processor builder.

The planner describes steps by kind and knows no runtime; a task hands this registry to
:meth:`rstreams.planner.topology.SubTopology.build` to get its live processors.
"""

from __future__ import annotations

from collections.abc import Mapping

from rstreams.planner.topology import ProcessorBuilder
from rstreams.runtime.engine.operators.aggregate import BUILDERS as _AGGREGATE
from rstreams.runtime.engine.operators.processors import BUILDERS as _PLAIN
from rstreams.runtime.engine.operators.sinks import BUILDERS as _SINKS
from rstreams.runtime.engine.operators.windowing import BUILDERS as _WINDOWED

__all__ = ["PROCESSORS"]

#: Every processor kind the embedded engine runs: stateless steps and sources
#: (processors.py), sinks (sinks.py), aggregations (aggregate.py), windowed aggregations
#: and joins (windowing.py).
PROCESSORS: Mapping[str, ProcessorBuilder] = {**_PLAIN, **_SINKS, **_AGGREGATE, **_WINDOWED}
