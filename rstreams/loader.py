"""Load a pipeline file: a Python file whose ``build()`` returns a Topology or a StreamBuilder."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path

from rstreams.dsl.stream import StreamBuilder
from rstreams.errors import PipelineFileError, TopologyError
from rstreams.planner.topology import Topology

__all__ = ["load_topology"]


def load_topology(path: str) -> Topology:
    """Load a pipeline file: run it and call its ``build()``.

    ``build()`` may return a Topology or a StreamBuilder (which is then built).
    """
    p = Path(path)
    if not p.is_file():
        raise PipelineFileError(
            f"pipeline file {path!r} " + ("is not a file" if p.exists() else "does not exist")
        )
    sys.path.insert(0, str(p.resolve().parent))  # let the pipeline import its neighbours
    try:
        try:
            ns = runpy.run_path(str(p), run_name="__rstreams_pipeline__")
        except Exception as e:
            raise PipelineFileError(
                f"pipeline file {path!r} raised while loading{_where(e, p)}: "
                f"{type(e).__name__}: {e}"
            ) from e
        build = ns.get("build")
        if build is None or not callable(build):
            raise PipelineFileError(
                f"pipeline file {path!r} defines no build() function; define "
                "`def build():` returning a Topology or a StreamBuilder"
            )
        try:
            result = build()
        except Exception as e:
            raise PipelineFileError(
                f"build() in {path!r} raised{_where(e, p)}: {type(e).__name__}: {e}"
            ) from e
        if isinstance(result, StreamBuilder):
            try:
                result = result.build()
            except TopologyError as e:
                raise PipelineFileError(f"the pipeline in {path!r} does not compile: {e}") from e
        if not isinstance(result, Topology):
            raise PipelineFileError(
                f"build() in {path!r} must return a Topology or a StreamBuilder; "
                f"got {type(result).__name__} instead"
            )
        return result
    finally:
        sys.path.remove(str(p.resolve().parent))


def _where(e: BaseException, path: Path) -> str:
    """' at file:line' of the deepest frame in the pipeline file, if any."""
    target = str(path.resolve())
    line = None
    for frame in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(frame.filename) == target:
            line = frame.lineno
    return f" at {path.name}:{line}" if line else ""
