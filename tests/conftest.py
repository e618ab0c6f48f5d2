"""Shared fixtures: the real corpus and the example pipelines of examples/."""

from __future__ import annotations

import importlib.util
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under pytest-xdist (--dist loadgroup) every Spark test runs in one worker process,
    # so a run starts one SparkSession, not one per worker.
    spark_dir = Path(__file__).parent / "spark"
    for item in items:
        if spark_dir in Path(item.fspath).parents:
            item.add_marker(pytest.mark.xdist_group("spark"))
