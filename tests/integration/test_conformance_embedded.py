"""Every example gives the same final tables on the test driver, the in-process engine
and the durable runtime (2 workers, file log, RocksDB, exactly-once)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from rstreams import run
from rstreams.testing import TopologyTestDriver

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data"

CASES = {
    "wordcount": {"sentences": DATA / "corpus.txt"},
    "branching": {"lines": DATA / "corpus.txt"},
    "stats": {"lines": DATA / "corpus.txt"},
    "windowed_wordcount": {"timed-sentences": DATA / "timed_sentences.txt"},
    "sessions": {"clicks": DATA / "clicks.jsonl"},
    "order_payment_join": {"orders": DATA / "orders.jsonl", "payments": DATA / "payments.jsonl"},
}


def driver_tables(topology, inputs: dict[str, Path]) -> dict[str, dict]:
    with TopologyTestDriver(topology) as d:
        for topic, path in inputs.items():
            for line in path.read_text(encoding="utf-8").splitlines():
                d.pipe(topic, line.encode("utf-8"), timestamp=0)  # the raw line, as a file gives it
        d.end_of_input()
        return {t: d.read_table(t) for t in topology.sink_topics}


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(CASES))
def test_same_final_tables_everywhere(example, tmp_path) -> None:
    path = str(ROOT / "examples" / f"{example}.py")
    topology = runpy.run_path(path)["build"]().build()
    inputs = {t: str(p) for t, p in CASES[example].items()}
    expected = driver_tables(topology, CASES[example])
    assert all(expected.values()), "every sink produces something"
    in_memory = run(topology, inputs).tables
    durable = run(topology, inputs, data_dir=str(tmp_path / "d"), workers=2, pipeline=path).tables
    assert in_memory == expected
    assert durable == expected
