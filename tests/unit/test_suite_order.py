"""The suite's own scheduling table (LONGEST_FIRST in tests/conftest.py) names tests
that exist: a renamed test would silently lose its place at the front."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_longest_first_entry_names_a_test_function(pytestconfig: pytest.Config) -> None:
    conftest = pytestconfig.pluginmanager.get_plugin(str(ROOT / "tests" / "conftest.py"))
    assert conftest is not None
    assert conftest.LONGEST_FIRST
    for nodeid in conftest.LONGEST_FIRST:
        path, name = nodeid.split("::")
        function = re.sub(r"\[.*\]$", "", name)
        source = (ROOT / path).read_text(encoding="utf-8")
        assert f"def {function}(" in source, f"LONGEST_FIRST: no {function} in {path}"
