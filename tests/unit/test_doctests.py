"""The examples in rstreams' docstrings are run, so a docstring that lies fails CI.

One test per module of the package: every ``>>>`` example in the module (its docstring,
classes, functions, methods) runs with :mod:`doctest`, in the module's globals.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import rstreams

PACKAGE = Path(rstreams.__file__).resolve().parent
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__main__":
            continue  # running it would run the command line
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


MODULES = _module_names()


def test_every_module_is_found() -> None:
    assert "rstreams.runner" in MODULES and "rstreams.dsl.stream" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    if name.startswith("rstreams.runtime.spark"):
        pytest.importorskip("pyspark", reason="the spark extra is not installed")
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, name)
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    failures = []
    for test in sorted(tests, key=lambda t: t.name):
        if not test.examples:
            continue
        out: list[str] = []
        result = runner.run(test, out=out.append, clear_globs=True)
        if result.failed:
            failures.append("".join(out))
    assert not failures, "\n".join(failures)
