"""Compiles the logical graph into a Topology and renders it (text, DOT, SVG/PNG)."""

from rstreams.planner.compiler import compile_pipeline
from rstreams.planner.topology import (
    ProcessorBuilder,
    ProcessorFactory,
    ProcessorRegistry,
    StoreSpec,
    SubTopology,
    TopicSpec,
    Topology,
    register_processor,
)

__all__ = [
    "ProcessorBuilder",
    "ProcessorFactory",
    "ProcessorRegistry",
    "StoreSpec",
    "SubTopology",
    "TopicSpec",
    "Topology",
    "compile_pipeline",
    "register_processor",
]
