"""Shared fixtures: the real corpus and the example pipelines of examples/."""

from __future__ import annotations

import importlib.util
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from rstreams import StreamBuilder, Topology
from tests.helpers.jvm import SPARK_JAVA_ENV

# No per-example deadline: the suite runs on loaded 2-core machines (CI beside other
# work), where a 200 ms example can take seconds; a deadline there only tests the load.
settings.register_profile("rstreams", deadline=None)
settings.load_profile("rstreams")


#: The fast subset (``./dev test --fast`` runs ``pytest -m fast``): every test of these
#: directories that is not marked slow (pytest_collection_modifyitems below marks them),
#: and elsewhere the tests marked ``@pytest.mark.fast`` by hand, a few per layer.
FAST_DIRECTORIES = ("tests/unit/", "tests/golden/")


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(FAST_DIRECTORIES) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.fast)


def pytest_configure(config: pytest.Config) -> None:
    """Cheaper JVMs for every Spark test (tests/helpers/jvm.py), also in subprocesses,
    unless the environment sets its own."""
    for key, value in SPARK_JAVA_ENV.items():
        os.environ.setdefault(key, value)


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


# Tests that run in one pytest-xdist worker under --dist loadgroup, by the start of their
# id (a directory, a file or a test): every test that starts Spark in one process, so a
# run starts one SparkSession and one standalone cluster, not one per worker (two JVMs,
# or two clusters, on 2 cores). A test outside tests/spark/ that starts Spark (a
# SparkSession, `rstreams run --backend spark`, a Spark block of the docs) is named here.
XDIST_GROUPS = {
    "tests/spark/": "spark",
    # test_spark_batch_gives_the_count_and_the_join_as_worked_out: `rstreams run --backend
    # spark --master local[2]`
    "tests/integration/test_watermarks.py::test_spark_batch_": "spark",
    # The docs' blocks marked slow are the Spark ones (docs/spark.md's word count).
    "tests/docs/test_snippets.py::test_page_with_slow_blocks": "spark",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` that also groups by XDIST_GROUPS.

    xdist's own grouping does not work with pytest 9.2: its worker appends ``@group``
    to ``item._nodeid``, which ``Item.nodeid`` no longer reads (it is made from
    ``item._id``), so ``xdist_group`` marks are silently ignored (pytest-xdist issue
    1386). The controller only sees test ids, so the group is told by path. The
    largest group is handed out first (xdist orders groups by size)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class DirectoryGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for prefix, group in XDIST_GROUPS.items():
                if nodeid.startswith(prefix):
                    return group
            return str(super()._split_scope(nodeid))

    return DirectoryGroupScheduling(config, log)
