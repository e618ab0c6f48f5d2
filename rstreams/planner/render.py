"""Graphviz rendering of a Topology.

Topics are ellipses (user topics white, shuffle topics orange and dashed, changelogs
grey), processors are boxes, sources/sinks are boxes in their own colours, state stores
are cylinders, and each sub-topology is a cluster.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from rstreams.errors import ConfigError
from rstreams.planner.describe import window_text

if TYPE_CHECKING:
    from rstreams.planner.topology import Topology

_FORMATS = ("svg", "png", "pdf", "dot")

_TOPIC_STYLE = {
    "source": 'shape=ellipse, style=filled, fillcolor="#ffffff"',
    "sink": 'shape=ellipse, style=filled, fillcolor="#ffffff"',
    "shuffle": 'shape=ellipse, style="filled,dashed", fillcolor="#ffe0b2", color="#e65100"',
    "changelog": 'shape=ellipse, style="filled,dotted", fillcolor="#eeeeee", color="#616161"',
}
_PROC_STYLE = {
    "source": 'shape=box, style="rounded,filled", fillcolor="#c8e6c9"',
    "sink": 'shape=box, style="rounded,filled", fillcolor="#bbdefb"',
    "processor": 'shape=box, style="rounded,filled", fillcolor="#fff9c4"',
}


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(topology: Topology) -> str:
    lines = [
        f"digraph {_q(topology.job_id)} {{",
        "  rankdir=TB;",
        '  node [fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9];',
        f"  label={_q('topology ' + topology.job_id)}; labelloc=t;",
    ]
    for t in topology.topics.values():
        label = f"{t.name}\\n({t.role}, queues: {'?' if t.queues is None else t.queues})"
        lines.append(f'  {_q("topic:" + t.name)} [label="{label}", {_TOPIC_STYLE[t.role]}];')
    for st in topology.subtopologies:
        lines.append(f"  subgraph cluster_{st.id} {{")
        lines.append(f'    label="sub-topology {st.id}"; style=rounded; color="#9e9e9e";')
        for f in st.factories:
            label = f"{f.name}\\n[{f.label}]"
            window = window_text(f)
            if window:
                label += f"\\n{window}"
            lines.append(f'    {_q("proc:" + f.name)} [label="{label}", {_PROC_STYLE[f.role]}];')
            for s in f.stores:
                lines.append(
                    f'    {_q("store:" + s)} [label="{s}", shape=cylinder, style=filled, '
                    'fillcolor="#d1c4e9"];'
                )
        lines.append("  }")
    for f in topology.factories.values():
        for c in f.children:
            lines.append(f"  {_q('proc:' + f.name)} -> {_q('proc:' + c)};")
        if f.role == "source" and f.topic:
            lines.append(f"  {_q('topic:' + f.topic)} -> {_q('proc:' + f.name)};")
        if f.role == "sink" and f.topic:
            lines.append(f"  {_q('proc:' + f.name)} -> {_q('topic:' + f.topic)};")
        for s in f.stores:
            spec = topology.stores[s]
            lines.append(
                f"  {_q('proc:' + f.name)} -> {_q('store:' + s)} [dir=both, style=dashed];"
            )
            lines.append(
                f"  {_q('store:' + s)} -> {_q('topic:' + spec.changelog_topic)} "
                '[style=dotted, label="changelog"];'
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _format_of(path: Path, format: str | None) -> str:
    fmt = (format or path.suffix.lstrip(".")).lower()
    if fmt not in _FORMATS:
        raise ConfigError(
            f"can not render a topology as {fmt or 'a file without extension'!r} ({path}); "
            f"use one of: {', '.join('.' + f for f in _FORMATS)}"
        )
    return fmt


def _pipe(dot: str, fmt: str) -> bytes:
    if shutil.which("dot") is None:
        raise ConfigError(
            "graphviz's 'dot' program is not installed; install it (Debian/Ubuntu: "
            "apt-get install graphviz) or write .dot output instead"
        )
    import graphviz

    return graphviz.pipe("dot", fmt, dot.encode("utf-8"))


def to_svg(topology: Topology) -> str:
    return _pipe(to_dot(topology), "svg").decode("utf-8")


def render(topology: Topology, path: str | Path, format: str | None = None) -> Path:
    path = Path(path)
    fmt = _format_of(path, format)
    dot = to_dot(topology)
    data = dot.encode("utf-8") if fmt == "dot" else _pipe(dot, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed write leaves nothing behind
        raise
    return path
