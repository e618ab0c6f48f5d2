"""Skipping a whole test directory that needs an optional extra (or a program) missing here.

A conftest.py that raises ``pytest.skip`` at import time skips its directory when pytest
walks to it, but stops pytest with a traceback when the directory (or a file in it) is
named on the command line. Instead, the conftest.py returns :func:`skipped_module` from
its ``pytest_pycollect_makemodule`` hook: each test module of the directory is reported
as skipped, with the reason, and never imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def importable(name: str) -> bool:
    """Whether module ``name`` is there (its parent packages are imported to find out)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


class SkippedModule(pytest.Module):
    """A test module that is not imported: its collection is skipped with ``reason``."""

    reason = ""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        pytest.skip(self.reason)


def skipped_module(module_path: Path, parent: pytest.Collector, reason: str) -> pytest.Module:
    """What ``pytest_pycollect_makemodule`` returns for a module to skip unimported."""
    module = SkippedModule.from_parent(parent, path=module_path)
    module.reason = reason
    return module
