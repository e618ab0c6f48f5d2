"""The Spark compiler's translation rules, gathered and registered in one place.

Each rule module keeps a ``RULES`` table (node type -> rule) and registers nothing
itself: :mod:`.steps` (sources, record steps, merge, sinks), :mod:`.aggregates` (keyed
aggregations) and :mod:`.windows` (windowed aggregations, late records, joins).
:data:`RULES` joins them, and :func:`register_rules` registers them with the compiler's
``translate`` dispatch: whoever compiles calls it first (:func:`~.runner.run_spark`
does); a :class:`~.compiler.Compiler` made before that refuses to start, naming it.

    >>> from rstreams.dsl import nodes as n
    >>> register_rules()
    >>> register_rules()  # again: changes nothing
    >>> from rstreams.runtime.spark.compiled import translate
    >>> translate.dispatch(n.JoinNode) is RULES[n.JoinNode]
    True
"""

from __future__ import annotations

from rstreams.dsl import nodes as n
from rstreams.runtime.spark import aggregates, steps, windows
from rstreams.runtime.spark.compiled import Rule, translate

__all__ = ["RULES", "register_rules"]

#: Every translation rule of the Spark compiler, by node type.
RULES: dict[type[n.Node], Rule] = {**steps.RULES, **aggregates.RULES, **windows.RULES}


def register_rules() -> None:
    """Register every rule of :data:`RULES` with ``translate``. Idempotent: a rule
    already registered for its type is left as it is (no dispatch cache cleared)."""
    for node_type, rule in RULES.items():
        if translate.registry.get(node_type) is not rule:
            translate.register(node_type, rule)
