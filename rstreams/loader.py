"""Load a pipeline file: a Python file whose ``build()`` returns a Topology or a StreamBuilder."""

from __future__ import annotations

import inspect
import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any

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
        except SyntaxError as e:
            if e.filename is None or os.path.abspath(e.filename) != str(p.resolve()):
                raise PipelineFileError(
                    f"pipeline file {path!r} raised while loading{_where(e, p)}: "
                    f"{type(e).__name__}: {e}"
                ) from e
            # (the file's own: where it is, once, not in Python's words "(f.py, line 3)")
            raise PipelineFileError(
                f"pipeline file {path!r} is not valid Python: {type(e).__name__} at "
                f"{p.name}:{e.lineno}: {e.msg}"
            ) from e
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
        _check_no_parameters(build, path)
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
        if result is None:
            raise PipelineFileError(
                f"build() in {path!r} returned None: it must return its StreamBuilder "
                "(or a Topology); end it with `return b`"
            )
        if not isinstance(result, Topology):
            raise PipelineFileError(
                f"build() in {path!r} must return a Topology or a StreamBuilder; "
                f"got {type(result).__name__} instead"
            )
        return result
    finally:
        sys.path.remove(str(p.resolve().parent))


def _check_no_parameters(build: Any, path: str) -> None:
    """Refuse a ``build()`` that needs arguments: nothing passes it any."""
    try:
        signature = inspect.signature(build)
    except (TypeError, ValueError):
        return  # (a builtin or an object whose signature Python can not tell)
    required = [
        name
        for name, param in signature.parameters.items()
        if param.default is param.empty
        and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD)
    ]
    if required:
        raise PipelineFileError(
            f"build() in {path!r} is called with no arguments, but it requires "
            f"{', '.join(required)}; give them defaults or read them another way "
            "(e.g. os.environ)"
        )


def _where(e: BaseException, path: Path) -> str:
    """' at file:line' of the deepest frame in the pipeline file, if any."""
    target = str(path.resolve())
    line = None
    for frame in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(frame.filename) == target:
            line = frame.lineno
    return f" at {path.name}:{line}" if line else ""
