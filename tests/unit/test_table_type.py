"""The table of an aggregation (RTable): what aggregations return, what a table
refuses, and that reading or writing a table compiles to the topology it always did."""

from __future__ import annotations

import doctest
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rstreams
import rstreams.dsl
from rstreams import (
    GroupedStream,
    MissingKeyError,
    RStream,
    RTable,
    SessionWindow,
    StreamBuilder,
    TopologyError,
    TumblingWindow,
    WindowStream,
)
from rstreams.dsl import nodes as n
from rstreams.dsl.stream import _Aggregations
from rstreams.testing import TopologyTestDriver

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: describe() of the pipelines below, recorded before aggregations returned an RTable
#: (when they returned a GroupedStream or an aggregated WindowStream).
BEFORE = json.loads((HERE / "table_describe_before_rtable.json").read_text())


def _keyed(job: str = "t") -> tuple[StreamBuilder, GroupedStream]:
    b = StreamBuilder(job)
    return b, b.source("in").keyBy(lambda v: v)


def test_rtable_is_exported_by_rstreams_and_the_dsl() -> None:
    assert rstreams.RTable is RTable is rstreams.dsl.RTable
    assert "RTable" in rstreams.__all__ and "RTable" in rstreams.dsl.__all__
    assert "Window" in rstreams.__all__ and "Window" in rstreams.dsl.__all__


@pytest.mark.parametrize("windowed", [False, True], ids=["grouped", "windowed"])
def test_every_aggregation_returns_a_table(windowed: bool) -> None:
    _, keyed = _keyed()
    stream: GroupedStream | WindowStream = keyed.window(SessionWindow(10)) if windowed else keyed
    tables = {
        "count": stream.count(name="c"),
        "sum": stream.sum(len, name="s"),
        "min": stream.min(name="mi"),
        "max": stream.max(len, name="ma"),
        "reduce": stream.reduce(lambda a, v: v, name="r"),
        "aggregate": stream.aggregate(list, lambda a, v: a, lambda a, c: a, name="a")
        if windowed
        else keyed.aggregate(list, lambda a, v: a, name="a"),
    }
    node_type = n.WindowAggregateNode if windowed else n.AggregateNode
    for op, table in tables.items():
        assert type(table) is RTable, op
        assert isinstance(table.node, node_type) and table.node.op == op
        assert table.windowed is windowed
        assert table.node.parents == (keyed.node,)
    assert isinstance(tables["count"].toRStream(), RStream)


def test_the_aggregations_are_shared_not_copied() -> None:
    for method in ("count", "sum", "min", "max", "reduce"):
        assert method not in vars(GroupedStream) and method not in vars(WindowStream)
        assert getattr(GroupedStream, method) is getattr(_Aggregations, method)
        assert getattr(WindowStream, method) is getattr(_Aggregations, method)
    assert ">>>" in (_Aggregations.count.__doc__ or "")  # the shared docstring's example
    assert not issubclass(RTable, (GroupedStream, WindowStream))


@pytest.mark.parametrize(
    ("second", "method"),
    [
        (lambda t: t.count(), "count"),
        (lambda t: t.reduce(lambda a, v: v), "reduce"),
        (lambda t: t.sum(), "sum"),
        (lambda t: t.aggregate(list, lambda a, v: a), "aggregate"),
        (lambda t: t.window(TumblingWindow(10)), "window"),
        (lambda t: t.keyBy(len), "keyBy"),
        (lambda t: t.groupByKey(), "groupByKey"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
@pytest.mark.parametrize("windowed", [False, True], ids=["grouped", "windowed"])
def test_a_second_aggregation_on_a_table_is_refused(second, method: str, windowed: bool) -> None:
    b, keyed = _keyed()
    table = (keyed.window(TumblingWindow(10)) if windowed else keyed).count(name="per-key")
    steps = len(b.pipeline.nodes)
    with pytest.raises(TopologyError) as info:
        second(table)
    message = str(info.value)
    assert message.startswith(f"{method}() on 'per-key': ")
    assert "table (RTable)" in message
    assert ".toRStream().keyBy(fn)" in message and ".toRStream().groupByKey()" in message
    # A MissingKeyError, like count() on an unkeyed RStream: also an AttributeError.
    assert isinstance(info.value, MissingKeyError) and isinstance(info.value, AttributeError)
    assert not hasattr(table, method)
    assert len(b.pipeline.nodes) == steps  # nothing was added


def test_the_refusal_names_a_generated_step_too() -> None:
    _, keyed = _keyed()
    with pytest.raises(TopologyError, match=r"^count\(\) on 'in-count-2': .*\.toRStream\(\)"):
        keyed.count().count()


def test_stream_methods_on_a_table_point_at_to_rstream() -> None:
    _, keyed = _keyed()
    table = keyed.count()
    with pytest.raises(AttributeError, match=r"call \.toRStream\(\)\.map\(\.\.\.\)"):
        table.map(str)  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match=r"no attribute 'nope'$"):
        table.nope  # type: ignore[attr-defined]  # noqa: B018


def test_late_is_for_window_tables_only() -> None:
    _, keyed = _keyed()
    with pytest.raises(TopologyError, match="only a window aggregation has late records"):
        keyed.count(name="plain").late()
    assert isinstance(keyed.window(TumblingWindow(10)).count().late(), RStream)


def test_the_way_from_a_table_to_a_second_aggregation_works() -> None:
    b, keyed = _keyed("two")
    counts = keyed.count()
    histogram = counts.toRStream().keyBy(lambda c: c).count(name="histogram")
    histogram.sink("histogram")
    with TopologyTestDriver(b.build()) as driver:
        for v in ["a", "b", "a", "c"]:
            driver.pipe("in", v)
        assert driver.state("two-histogram-store") == {1: 3, 2: 1}


def _before_pipelines() -> dict[str, StreamBuilder]:
    """The pipelines whose describe() was recorded in BEFORE (same code as then)."""
    out = {}
    b = StreamBuilder("t1")
    b.source("in").keyBy(lambda v: v).count().sink("out")
    out["count_sink"] = b
    b = StreamBuilder("t2")
    t = b.source("in").keyBy(lambda v: v).sum(len, name="total")
    t.toRStream().map(str).sink("out")
    t.toRStream().groupByKey().max().sink("max")
    out["sum_toRStream_regroup"] = b
    b = StreamBuilder("t3")
    w = b.source("in").keyBy(lambda v: v).window(TumblingWindow(60_000, grace=5)).count()
    w.sink("counts")
    w.late().sink("too-late")
    out["window_count_late"] = b
    b = StreamBuilder("t4")
    left = b.source("left", "json").keyBy(lambda v: v["k"]).reduce(lambda a, v: v).toRStream()
    right = b.source("right", "json")
    (left.join(right)
        .where(lambda v: v["k"]).equalTo(lambda v: v["k"])
        .apply(lambda a, c: [a, c])
        .sink("joined"))  # fmt: skip
    out["table_stream_join"] = b
    b = StreamBuilder("t5")
    (b.source("in").keyBy(lambda v: v)
        .window(SessionWindow(10), emit="close")
        .aggregate(list, lambda a, v: [*a, v], lambda x, y: x + y, name="sess")
        .toRStream()
        .print("s"))  # fmt: skip
    out["session_aggregate"] = b
    return out


@pytest.mark.parametrize("pipeline", sorted(BEFORE))
def test_reading_and_writing_a_table_compiles_as_before(pipeline: str) -> None:
    assert _before_pipelines()[pipeline].build().describe() == BEFORE[pipeline]


def test_joins_take_the_stream_of_a_table_not_the_table() -> None:
    # Aggregation results never had join methods: a table joins through toRStream().
    b, keyed = _keyed()
    table, other = keyed.count(), b.source("other")
    with pytest.raises(AttributeError, match=r"toRStream\(\)\.join"):
        table.join(other)  # type: ignore[attr-defined]
    with pytest.raises(TopologyError, match=r"expects an RStream or a StreamTable .*; got RTable"):
        other.join(table)  # type: ignore[arg-type]
    assert isinstance(table.toRStream().join(other), rstreams.JoinedStream)


def test_window_stream_without_aggregation_still_refuses_results() -> None:
    _, keyed = _keyed()
    windows = keyed.window(TumblingWindow(10))
    for method in (windows.toRStream, windows.late):
        with pytest.raises(TopologyError, match="needs an aggregation first"):
            method()
    with pytest.raises(TopologyError, match="needs an aggregation first"):
        windows.sink("out")


DOCTEST = """
>>> from rstreams import StreamBuilder
>>> from rstreams.testing import TopologyTestDriver
>>> b = StreamBuilder("docs")
>>> counts = b.source("in").keyBy(lambda v: v).count()
>>> counts
RTable('in-count-2')
>>> counts.count()
Traceback (most recent call last):
...
rstreams.errors.MissingKeyError: count() on 'in-count-2': that step is an aggregation, ...
>>> counts.toRStream().keyBy(lambda c: c).count(name="how-many").sink("histogram")
>>> with TopologyTestDriver(b.build()) as d:
...     for v in ["x", "y", "x"]: d.pipe("in", v)
...     d.state("docs-how-many-store")
{1: 2, 2: 1}
"""


def test_doctest_style_example() -> None:
    test = doctest.DocTestParser().get_doctest(DOCTEST, {}, "rtable", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def _mypy_strict(tmp_path: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if mypy is None:
        pytest.skip("mypy is not installed next to this Python")
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n")  # a user's own settings: not the project's
    return subprocess.run(
        [mypy, "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         "--config-file", str(config), "--follow-imports=silent", *map(str, files)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_user_pipeline_type_checks_under_mypy_strict(tmp_path: Path) -> None:
    proc = _mypy_strict(tmp_path, ROOT / "tests" / "typing" / "user_pipeline.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_reports_a_second_aggregation_on_a_table(tmp_path: Path) -> None:
    user = tmp_path / "twice.py"
    user.write_text(
        "from rstreams import StreamBuilder, TumblingWindow\n"
        "b = StreamBuilder('j')\n"
        "b.source('in').keyBy(len).count().count()\n"
        "b.source('in2').keyBy(len).count().window(TumblingWindow(5))\n"
        "b.source('in3').keyBy(len).window('tumbling')\n"
    )
    out = _mypy_strict(tmp_path, user).stdout
    assert '"RTable" has no attribute "count"' in out, out
    assert '"RTable" has no attribute "window"' in out, out
    assert 'incompatible type "str"; expected "TumblingWindow | HoppingWindow' in out, out
