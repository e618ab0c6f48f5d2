"""The project's packaging metadata (pyproject.toml)."""

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_license_is_an_spdx_string():
    # A TOML table (license = { text = ... }) makes setuptools >= 77 print a page of
    # deprecation warnings at every install (PEP 639).
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert project["license"] == "Apache-2.0"


def test_build_backend_understands_spdx_license():
    # A string license needs setuptools >= 77; older ones refuse the project.
    requires = tomllib.loads(PYPROJECT.read_text())["build-system"]["requires"]
    assert "setuptools>=77" in requires
