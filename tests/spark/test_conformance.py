"""The example pipelines give the same final tables on the test driver, on Spark batch
and on Spark Structured Streaming (last value per key)."""

from __future__ import annotations

import json
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rstreams
from rstreams import StreamBuilder, Topology
from rstreams import functions as F
from rstreams.runtime.results import write_table
from rstreams.runtime.spark import run_spark
from rstreams.testing import TopologyTestDriver

pytestmark = pytest.mark.slow

EXAMPLES = ("wordcount", "branching", "stats")
#: The other examples and their inputs (topic -> file of examples/data), in source order.
DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
BATCH_EXAMPLES = {
    "wordcount_spark": {"sentences": "corpus.txt"},
    "windowed_wordcount": {"timed-sentences": "timed_sentences.txt"},
    "sessions": {"clicks": "clicks.jsonl"},
    "order_payment_join": {"orders": "orders.jsonl", "payments": "payments.jsonl"},
    "access_log": {"access-log": "access.log"},
    "enrichment": {"shop": "shop.jsonl"},
}


def driver_tables(topology: Topology, lines: list[str]) -> dict[str, dict[Any, Any]]:
    """Final tables on the test driver: pipe every line, keep the last value per key."""
    tables: dict[str, dict[Any, Any]] = {t: {} for t in topology.sink_topics}
    (source,) = topology.source_topics
    with TopologyTestDriver(topology) as driver:
        for line in lines:
            driver.pipe(source, line)
        for topic in topology.sink_topics:
            for r in driver.read(topic):
                key = tuple(r.key) if isinstance(r.key, list) else r.key
                tables[topic][key] = r.value
    return tables


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory, corpus_lines: list[str]) -> Path:
    """A third of the real corpus, split over two files of one directory."""
    lines = corpus_lines[:2000]
    d = tmp_path_factory.mktemp("corpus")
    (d / "part-1.txt").write_text("\n".join(lines[:1200]) + "\n", encoding="utf-8")
    (d / "part-2.txt").write_text("\n".join(lines[1200:]) + "\n", encoding="utf-8")
    return d


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_driver_batch_streaming(
    name: str,
    example_topology: Callable[[str], Topology],
    corpus_dir: Path,
    corpus_lines: list[str],
    spark: Any,
    tmp_path: Path,
) -> None:
    topology = example_topology(name)
    (source,) = topology.source_topics
    expected = driver_tables(topology, corpus_lines[:2000])
    assert all(expected.values())

    batch = run_spark(topology, {source: str(corpus_dir)}, spark=spark)
    assert batch.tables == expected
    assert batch.records_in == 2000

    outputs = {t: str(tmp_path / f"{t}.jsonl") for t in topology.sink_topics}
    streaming = run_spark(
        topology,
        {source: str(corpus_dir)},
        spark=spark,
        streaming=True,
        checkpoint=str(tmp_path / "checkpoint"),
        outputs=outputs,
    )
    assert streaming.tables == expected
    for topic, path in outputs.items():
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
        assert {r["key"]: r["value"] for r in rows} == expected[topic]


def test_every_example_is_compared() -> None:
    examples = {p.stem for p in DATA.parent.glob("*.py")}
    assert examples == set(EXAMPLES) | set(BATCH_EXAMPLES)


@pytest.mark.parametrize("name", sorted(BATCH_EXAMPLES))
def test_examples_driver_spark_batch(
    name: str, example_topology: Callable[[str], Topology], spark: Any
) -> None:
    topology = example_topology(name)
    inputs = {topic: DATA / file for topic, file in BATCH_EXAMPLES[name].items()}
    # The driver keeps one stream time for both sides of a join: it gets the records of
    # several inputs in the order their events happened, as one partition would (batch
    # has no stream time: its join is the exact one).
    records = [
        (json.loads(line)["ts"] if len(inputs) > 1 else 0, i, topic, line)
        for topic, path in inputs.items()
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines())
    ]
    with TopologyTestDriver(topology) as driver:
        for _, _, topic, line in sorted(records, key=lambda r: r[:2]):
            driver.pipe(topic, line.encode("utf-8"))  # the raw line, as Spark reads it
        driver.end_of_input()
        expected = {t: driver.read_table(t) for t in topology.sink_topics}
    assert all(expected.values())
    got = run_spark(topology, {t: str(p) for t, p in inputs.items()}, spark=spark)
    assert got.tables == expected


def mixed_pipeline() -> Topology:
    """Every node type, order-sensitive folds, tuples, floats and mixed types."""
    b = StreamBuilder("mixed")
    lines = b.source("lines")
    words = lines.flatMap(lambda line: line.split())
    # Non-commutative folds: only right if records are folded in source order.
    words.filter(lambda w: len(w) > 3).keyBy(lambda w: w[:1].lower()).reduce(
        lambda acc, w: acc[-40:] + "|" + w, name="concat"
    ).sink("concat")
    words.keyBy(len).aggregate(lambda: (), lambda acc, w: (*acc, w)[-3:], name="last3").sink(
        "last3", "msgpack"
    )
    # Float sums depend on order; mixed int/float min keeps Python's tie rules.
    words.keyBy(lambda w: len(w) % 3).sum(lambda w: 0.1 * len(w), name="fsum").sink("fsum")
    words.keyBy(lambda w: w[:1]).min(
        lambda w: len(w) if len(w) % 2 else float(len(w)), name="mixmin"
    ).sink("mixmin")
    # A stateless sink: the last value per key, in source order.
    lines.map(lambda line: (len(line), line[:1])).filter(lambda t: t[0] > 0).sink("last")
    # Built-ins, merge, peek, selectTimestamp, count after a native keyBy.
    upper = lines.map(F.upper())
    lower = lines.map(F.lower()).peek(lambda v: None).selectTimestamp(lambda v: 5)
    upper.merge(lower).flatMap(F.words()).keyBy(F.identity()).count(name="cased").sink("cased")
    lines.map(F.strip()).filter(F.identity()).keyBy(F.length()).max(F.length()).sink("len")
    return b.build()


def test_mixed_pipeline_matches_driver(corpus_lines: list[str], spark: Any, tmp_path: Path) -> None:
    lines = corpus_lines[:600]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    topology = mixed_pipeline()
    expected = driver_tables(topology, lines)
    got = run_spark(topology, {"lines": str(path)}, spark=spark)
    for topic in topology.sink_topics:
        assert got.tables[topic] == expected[topic], topic
    # Same Python types, not just equal values.
    assert {type(v) for v in got.tables["last3"].values()} == {tuple}
    assert {type(v) for v in got.tables["fsum"].values()} == {float}


def test_reduce_on_streaming_continues_from_state(spark: Any, tmp_path: Path) -> None:
    b = StreamBuilder("fold")
    b.source("in").keyBy(lambda v: v[:1]).reduce(lambda a, v: a + v).sink("out")
    topology = b.build()
    src = tmp_path / "in"
    src.mkdir()
    (src / "1.txt").write_text("ab\nac\nb1\n")
    ckpt = str(tmp_path / "ck")
    first = run_spark(topology, {"in": str(src)}, spark=spark, streaming=True, checkpoint=ckpt)
    assert first.tables["out"] == {"a": "abac", "b": "b1"}
    (src / "2.txt").write_text("ad\n")
    second = run_spark(topology, {"in": str(src)}, spark=spark, streaming=True, checkpoint=ckpt)
    assert second.tables["out"] == {"a": "abacad", "b": "b1"}


def test_rstreams_run_backend_spark(
    example_topology: Callable[[str], Topology],
    corpus_lines: list[str],
    spark: Any,
    tmp_path: Path,
) -> None:
    import rstreams

    topology = example_topology("wordcount")
    path = tmp_path / "in.txt"
    path.write_text("\n".join(corpus_lines[:500]) + "\n", encoding="utf-8")
    seen: list[Any] = []
    result = rstreams.run(
        topology, {"sentences": str(path)}, backend="spark", spark=spark, progress=seen.append
    )
    assert result.tables == driver_tables(topology, corpus_lines[:500])
    assert result.records_in == 500
    assert all(p.detail for p in seen)  # "stage N (...): done/total tasks"


class RecordLines:
    """A foreach side effect the test can see: each process appends to its own file."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __call__(self, value: str) -> None:
        import os

        with open(self.directory / str(os.getpid()), "a") as f:
            f.write(value + "\n")


def test_print_and_foreach(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["b a", "c", "a a"]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n")

    def topology(directory: Path) -> Topology:
        directory.mkdir()
        b = StreamBuilder("effects")
        src = b.source("in")
        src.flatMap(F.words()).print("w")
        src.foreach(RecordLines(directory))
        return b.build()

    with TopologyTestDriver(topology(tmp_path / "driver")) as driver:
        driver.pipe_all("in", lines)
    expected = capsys.readouterr().out
    run_spark(topology(tmp_path / "spark"), {"in": str(path)}, spark=spark)
    assert capsys.readouterr().out == expected == "[w] b\n[w] a\n[w] c\n[w] a\n[w] a\n"
    seen = [line for f in (tmp_path / "spark").iterdir() for line in f.read_text().splitlines()]
    assert sorted(seen) == sorted(lines)  # each record once


#: The examples with windows and joins, and their inputs (topic -> file of
#: examples/data, in source order).
STREAMING_EXAMPLES = {
    "windowed_wordcount": {"timed-sentences": "timed_sentences.txt"},
    "sessions": {"clicks": "clicks.jsonl"},
    "order_payment_join": {"orders": "orders.jsonl", "payments": "payments.jsonl"},
}


def driver_and_inboxes(
    topology: Topology, texts: dict[str, tuple[str, str]], tmp_path: Path
) -> tuple[dict[str, dict[Any, Any]], dict[str, str]]:
    """The driver's final tables for ``texts`` (topic -> (file name, text)), each topic's
    lines piped in turn (source order), then the end of input; and the inputs of a
    streaming run: one directory per topic holding its file."""
    inputs = {}
    with TopologyTestDriver(topology) as driver:
        for topic, (file, text) in texts.items():
            for line in text.splitlines():
                driver.pipe(topic, line.encode("utf-8"))  # the raw line, as Spark reads it
            inbox = tmp_path / topic
            inbox.mkdir()
            (inbox / file).write_text(text, encoding="utf-8")
            inputs[topic] = str(inbox)
        driver.end_of_input()
        expected = {t: driver.read_table(t) for t in topology.sink_topics}
    return expected, inputs


@pytest.mark.parametrize("name", sorted(STREAMING_EXAMPLES))
def test_window_and_join_examples_streaming(
    name: str, example_topology: Callable[[str], Topology], spark: Any, tmp_path: Path
) -> None:
    """Structured Streaming over one directory per topic, one bounded run: the driver's
    tables once the input has ended (sessions closed, unpaid orders emitted)."""
    topology = example_topology(name)
    data = Path(__file__).resolve().parents[2] / "examples" / "data"
    texts = {
        t: (f, (data / f).read_text(encoding="utf-8")) for t, f in STREAMING_EXAMPLES[name].items()
    }
    expected, inputs = driver_and_inboxes(topology, texts, tmp_path)
    assert all(expected.values())
    got = run_spark(
        topology, inputs, spark=spark, streaming=True, checkpoint=str(tmp_path / "checkpoint")
    )
    assert got.tables == expected


@pytest.mark.parametrize("name", ["windowed_wordcount", "sessions"])
def test_windowed_output_lines_are_flat_and_the_same_on_both_backends(
    name: str, example_topology: Callable[[str], Topology], spark: Any, tmp_path: Path
) -> None:
    topology = example_topology(name)
    (sink,) = topology.sink_topics
    inputs = {topic: str(DATA / file) for topic, file in BATCH_EXAMPLES[name].items()}
    embedded = tmp_path / "embedded.jsonl"
    write_table(rstreams.run(topology, inputs).tables[sink], str(embedded))
    on_spark = tmp_path / "spark.jsonl"
    run_spark(topology, inputs, spark=spark, outputs={sink: str(on_spark)})
    # Outputs too big to collect: the executors write the lines, to a directory.
    by_executors = tmp_path / "executors"
    run_spark(topology, inputs, spark=spark, outputs={sink: str(by_executors)}, collect=False)
    parts = sorted(by_executors.glob("part-*"))
    (tmp_path / "executors.jsonl").write_text("".join(p.read_text() for p in parts))

    def rows(path: Path) -> list[str]:
        lines = path.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines]
        assert rows
        for row in rows:
            assert list(row) in (["key", "window", "value"], ["key", "window", "closed", "value"])
            assert isinstance(row["key"], str)
            assert list(row["window"]) == ["start", "end"]
        # Spark batch has no stream time to close windows by: no "closed" label there.
        return sorted(json.dumps({k: v for k, v in r.items() if k != "closed"}) for r in rows)

    assert rows(on_spark) == rows(embedded)
    assert rows(tmp_path / "executors.jsonl") == rows(embedded)
    if name == "windowed_wordcount":  # emit="update": line for line the same
        spark_lines, embedded_lines = on_spark.read_text(), embedded.read_text()
        assert sorted(spark_lines.splitlines()) == sorted(embedded_lines.splitlines())


#: Pipelines with uneven queues (their ``build()`` and ``lines()``: topic -> lines).
UNEVEN = Path(__file__).resolve().parents[1] / "pipelines"


@pytest.mark.parametrize("name", ["uneven_count", "uneven_join"])
def test_uneven_queues_streaming(name: str, spark: Any, tmp_path: Path) -> None:
    """One queue of a step far ahead in event time of another: the streaming replay
    judges each record by the step's time, as the driver (and the embedded runtimes,
    tests/integration/test_conformance_embedded.py) do; Spark batch too where nothing
    is late (the join)."""
    module = runpy.run_path(str(UNEVEN / f"{name}.py"))
    topology = module["build"]().build()
    texts = {t: ("part.txt", "\n".join(ls) + "\n") for t, ls in module["lines"]().items()}
    expected, inputs = driver_and_inboxes(topology, texts, tmp_path)
    assert all(expected.values())
    got = run_spark(
        topology, inputs, spark=spark, streaming=True, checkpoint=str(tmp_path / "checkpoint")
    )
    assert got.tables == expected
    if name == "uneven_join":
        assert run_spark(topology, inputs, spark=spark).tables == expected


def test_what_closes_before_the_end_streaming(spark: Any, tmp_path: Path) -> None:
    """After a keyBy into three queues, a window closes by event time once the input's
    time passed it, whether or not its queue gets a later record: the same windows
    close before the end of input (``closed="event-time"``) on the streaming replay as
    on the driver and the embedded runtimes (tests/integration/
    test_conformance_embedded.py). Spark batch has no "before the end": it sees the
    whole input at once and labels nothing."""
    module = runpy.run_path(str(UNEVEN / "closing_count.py"))
    topology = module["build"]().build()
    texts = {t: ("part.txt", "\n".join(ls) + "\n") for t, ls in module["lines"]().items()}
    _, inputs = driver_and_inboxes(topology, texts, tmp_path)
    got = run_spark(
        topology, inputs, spark=spark, streaming=True, checkpoint=str(tmp_path / "checkpoint")
    )
    assert module["labelled"](got.tables["counts"]) == module["expected"]()
