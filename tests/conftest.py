"""Shared fixtures: the real corpus and the example pipelines of examples/."""

from __future__ import annotations

import importlib.util
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

from rstreams import StreamBuilder, Topology

# No per-example deadline: the suite runs on loaded 2-core machines (CI beside other
# work), where a 200 ms example can take seconds; a deadline there only tests the load.
settings.register_profile("rstreams", deadline=None)
settings.load_profile("rstreams")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _load_example(name: str) -> Topology:
    """Import ``examples/<name>.py`` from its path and compile what its build() returns."""
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"rstreams_example_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = module.build()
    return built.build() if isinstance(built, StreamBuilder) else built


@pytest.fixture(scope="session")
def example_topology() -> Callable[[str], Topology]:
    """``example_topology("wordcount")`` -> the compiled Topology of examples/wordcount.py."""
    return _load_example


@pytest.fixture(scope="session")
def corpus_text() -> str:
    """examples/data/corpus.txt (~317 KB of real prose)."""
    return (EXAMPLES / "data" / "corpus.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def corpus_lines(corpus_text: str) -> list[str]:
    """The corpus split into lines: one record per line, as `rstreams run --input` reads it."""
    return corpus_text.splitlines()


# A pipeline whose step fails on a "0" line: parse() (line 3 of the file) raises
# ZeroDivisionError; other lines are summed by parity into 'sums'.
FAILING_PIPELINE = """
from rstreams import StreamBuilder
def parse(line):
    return 10 // int(line)
def build():
    b = StreamBuilder("div")
    b.source("numbers").map(parse).keyBy(lambda v: v % 2).sum().sink("sums")
    return b
"""


@pytest.fixture(scope="session")
def failing_pipeline() -> Callable[[Path], Path]:
    """``failing_pipeline(tmp_path / "p.py")`` writes the pipeline "div" there and returns
    the path: source 'numbers', step 'numbers-map-1' runs ``parse`` = ``10 // int(line)``
    (line 3 of the file), so a "0" line fails with ZeroDivisionError; the results, summed
    by ``value % 2``, go to 'sums'."""

    def write(path: Path) -> Path:
        path.write_text(textwrap.dedent(FAILING_PIPELINE))
        return path

    return write


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/spark ``xdist_group("spark")``.

    Under pytest-xdist (``--dist loadgroup``) the Spark tests then all run in one worker
    process: one SparkSession and one standalone cluster per run, not one per worker.
    ``tryfirst``: xdist's worker reads the marks in its own ``pytest_collection_modifyitems``
    (it appends ``@spark`` to the test ids, which the scheduler groups by). Its plugin is
    registered after this conftest, so it would run first and see no mark."""
    spark_dir = Path(__file__).parent / "spark"
    for item in items:
        if spark_dir in Path(item.fspath).parents:
            item.add_marker(pytest.mark.xdist_group("spark"))
