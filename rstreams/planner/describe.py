"""Text rendering of a Topology (checked against golden files in tests)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rstreams.planner.topology import ProcessorFactory, Topology


def _queues(q: int | None) -> str:
    return "?" if q is None else str(q)


def window_text(f: ProcessorFactory) -> str | None:
    """The window of a windowed aggregation or windowed join step, with its units
    (e.g. ``tumbling size=60000 ms, grace=0 ms``); None for other steps and for the
    shuffle parts of the step."""
    if f.role != "processor" or f.name != f.node.name:
        return None
    window = getattr(f.node, "window", None)
    if f.kind == "join":
        return _join_text(f.node)
    return None if window is None else str(window)


def _join_text(node: Any) -> str:
    """A join step's kind, window or grace and ttl (e.g. ``left temporal join, grace=0
    ms, ttl=86400000 ms``)."""
    if node.join_kind == "windowed":
        return f"{node.join_type} windowed join, {node.window}"
    table = {"L": ", right side a table", "R": ", left side a table"}.get(node.emits, "")
    return (
        f"{node.join_type} {node.join_kind} join{table}, grace={node.grace} ms, ttl={node.ttl} ms"
    )


def _line(f: ProcessorFactory) -> str:
    external = getattr(f.node, "external", None) if f.kind in ("source", "sink") else None
    stream = f", Redis stream: {external.stream}" if external is not None else ""
    if f.role == "source":
        return f"Source: {f.name} (topic: {f.topic}{stream})"
    if f.role == "sink":
        return f"Sink: {f.name} (topic: {f.topic}{stream})"
    window = window_text(f)
    label = "" if f.kind == "join" else "window: "  # (a join's text names its kind)
    shown = f" ({label}{window})" if window else ""
    stores = f" (stores: [{', '.join(f.stores)}])" if f.stores else ""
    return f"Processor: {f.name} [{f.label}]{shown}{stores}"


def describe_text(topology: Topology) -> str:
    out = [f"Topology: {topology.job_id}"]
    for st in topology.subtopologies:
        out.append(f"  Sub-topology: {st.id}")
        for f in st.factories:
            out.append(f"    {_line(f)}")
            if f.children:
                out.append(f"      --> {', '.join(f.children)}")
            if f.parents:
                out.append(f"      <-- {', '.join(f.parents)}")
    out.append("  Topics:")
    width = max(len(t) for t in topology.topics)
    for t in topology.topics.values():
        out.append(f"    {t.name:<{width}}  {t.role:<9}  queues: {_queues(t.queues)}")
    if topology.stores:
        out.append("  Stores:")
        for s in topology.stores.values():
            out.append(
                f"    {s.name}  (processor: {s.processor}, changelog: {s.changelog_topic}, "
                f"queues: {_queues(s.queues)})"
            )
    return "\n".join(out) + "\n"


def tree_data(topology: Topology) -> list[dict[str, Any]]:
    """The topology as a tree of plain data (what a job publishes for ``rstreams top``,
    which draws it without loading any code): per sub-topology its ``id``, ``sources``
    and ``sinks`` (topics) and ``roots``, each step ``{"name", "kind", "topic",
    "children", "repeated"}``; a step reached again (a merge or a join) is listed with
    ``repeated`` and no children."""
    subs = []
    for sub in topology.subtopologies:
        by_name = {f.name: f for f in sub.factories}
        seen: set[str] = set()

        def node(name: str, by_name: dict[str, Any] = by_name, seen: set[str] = seen) -> dict:
            f = by_name[name]
            step = {"name": f.name, "kind": f.label, "topic": f.topic}
            if name in seen:
                return {**step, "children": [], "repeated": True}
            seen.add(name)
            kids = [node(c) for c in f.children if c in by_name]
            return {**step, "children": kids, "repeated": False}

        subs.append(
            {
                "id": sub.id,
                "sources": list(sub.source_topics),
                "sinks": list(sub.sink_topics),
                "roots": [node(f.name) for f in sub.factories if not f.parents],
            }
        )
    return subs
