"""rstreams' JSON paths on Nexmark events: the json module (as rstreams used it before
msgspec) against what rstreams does now (msgspec where it writes and reads the same).

    python bench/json_paths.py [--events 100000] [--runs 5] [--queries q0 q1]

Per path: microseconds per value of the json module's way and of rstreams' way now, and
the ratio (the json module's time over rstreams': above 1, rstreams is faster). The
values are bench/nexmark/generate.py's events (seed 1): dicts of a dict of ints and
strings. Paths:

- ``serialize`` / ``serialize_many``: the "json" serde writing values (a sink's values,
  one by one in the test driver, a column at a time in the engines);
- ``deserialize`` / ``deserialize_many``: reading them (a source with
  ``deserializer="json"``, the sink topic folded into a final table);
- key columns: the str and int keys and the windowed keys of a sink (``serialize_many``
  and ``deserialize_many``), and q1's values (floats);
- ``table_lines``: the lines ``--output`` writes for a final table of events (with
  json.dumps's spaced separators);
- a Redis stream entry read whole (its fields as a JSON object: ASCII, escaped);
- the check alone: ``json.dumps`` against msgspec without the check that makes it safe.

Each figure is the best of ``--runs``, with the garbage collector set as the engines
set it while records flow (rstreams.runtime.gctune). ``--queries``: also time
``rstreams.run`` of examples/nexmark/qN.py in memory (read, key, write and fold the
events, write the table) with the serde and the table writer of either kind.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import json.scanner
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

import rstreams
from rstreams.runtime import gctune, results, streamentries
from rstreams.serde import (
    JsonSerde,
    _encode_basestring,
    _json_object,
    get_serde,
    json_texts,
    scan_json_many,
)
from rstreams.windowed import Windowed

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


events = _load(ROOT / "bench" / "nexmark" / "generate.py", "nexmark_generate").events


# -- the json module's way: the "json" serde and table writer before msgspec ------------


class StdlibJsonSerde(JsonSerde):
    """``JsonSerde`` as it was: json.dumps, json.loads and its C scanner."""

    def serialize(self, obj: Any) -> bytes:
        t = type(obj)
        if t is str:
            return _encode_basestring(obj).encode("utf-8")
        if t is int:
            return int.__repr__(obj).encode("utf-8")
        return self._text(obj).encode("utf-8")

    def deserialize(self, data: bytes) -> Any:
        return json.loads(data, object_hook=_json_object)

    def serialize_many(self, objs: list[Any]) -> list[bytes]:
        return list(map(str.encode, json_texts(objs, self._text)))

    def deserialize_many(self, data: list[bytes]) -> list[Any]:
        return scan_json_many(data, self.deserialize)


def stdlib_table_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=results._output_default)


@contextlib.contextmanager
def stdlib_json() -> Iterator[None]:
    """The "json" serde and the table writer of before, for a run in this process."""
    saved = {name: JsonSerde.__dict__[name] for name in StdlibJsonSerde.__dict__
             if name in JsonSerde.__dict__ and callable(JsonSerde.__dict__[name])}  # fmt: skip
    table_json = results._table_json
    try:
        for name in saved:
            setattr(JsonSerde, name, StdlibJsonSerde.__dict__[name])
        results._table_json = stdlib_table_json
        yield
    finally:
        for name, fn in saved.items():
            setattr(JsonSerde, name, fn)
        results._table_json = table_json


# -- timing -------------------------------------------------------------------------------


def best(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def row(name: str, n: int, old: float, new: float) -> None:
    print(f"{name:34} {old / n * 1e6:9.3f} {new / n * 1e6:9.3f} {old / new:7.2f}", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--queries", nargs="*", default=[], help="e.g. q0 q1 (default: none)")
    args = p.parse_args(argv)
    with gctune.tuned():  # (the collector as the engines set it while records flow)
        paths(args.events, args.runs)
    if args.queries:
        queries(args.queries, args.events, args.runs)


def paths(n: int, runs: int) -> None:
    """Each path, both ways."""
    values = list(events(n))
    old, new = StdlibJsonSerde(), get_serde("json")
    assert type(new) is JsonSerde
    data = old.serialize_many(values)
    assert new.serialize_many(values) == data and new.deserialize_many(data) == values
    size = sum(map(len, data)) / n
    print(f"{n:,} Nexmark events, {size:.0f} bytes of JSON each; best of {runs}; ", end="")
    print(f"msgspec {msgspec.__version__}")
    print(f"{'path':34} {'json us':>9} {'now us':>9} {'ratio':>7}")

    def pair(name: str, count: int, old_fn: Callable[[], Any], new_fn: Callable[[], Any]) -> None:
        assert old_fn() == new_fn(), name
        row(name, count, best(old_fn, runs), best(new_fn, runs))

    def column(name: str, objs: list[Any]) -> None:
        raw = old.serialize_many(objs)
        m = len(objs)
        pair(f"serialize_many, {name}", m, lambda: old.serialize_many(objs),
             lambda: new.serialize_many(objs))  # fmt: skip
        pair(f"deserialize_many, {name}", m, lambda: old.deserialize_many(raw),
             lambda: new.deserialize_many(raw))  # fmt: skip

    pair("serialize, one at a time", n, lambda: [old.serialize(v) for v in values],
         lambda: [new.serialize(v) for v in values])  # fmt: skip
    pair("deserialize, one at a time", n, lambda: [old.deserialize(d) for d in data],
         lambda: [new.deserialize(d) for d in data])  # fmt: skip
    column("events", values)
    column("str keys", [f"user{i % 5000}@example.com" for i in range(n)])
    counts = [i * 7919 % 1_000_003 for i in range(n)]
    column("int counts", counts)
    wins = [Windowed(f"item-{i % 977}", i * 1000, i * 1000 + 10_000, "event-time")
            for i in range(n)]  # fmt: skip
    column("windowed keys", wins)
    q1 = [{"auction": b["auction"], "bidder": b["bidder"], "price": 0.908 * b["price"],
           "dateTime": b["dateTime"]} for e in values if (b := e.get("bid"))]  # fmt: skip
    column("q1 values (floats)", q1)

    def old_lines(table: dict[Any, Any]) -> list[str]:
        with stdlib_json():
            return results.table_lines(table)

    table = {f"event-{i}": v for i, v in enumerate(values)}
    pair("table_lines, events", n, lambda: old_lines(table), lambda: results.table_lines(table))
    wtable = dict(zip(wins, counts))
    pair("table_lines, windowed counts", n, lambda: old_lines(wtable),
         lambda: results.table_lines(wtable))  # fmt: skip

    entries = [{k: str(v) for k, v in e["bid"].items()} for e in values if "bid" in e]
    pair("Redis entry -> value (whole entry)", len(entries),
         lambda: [json.dumps(d, separators=(",", ":")).encode() for d in entries],
         lambda: list(map(streamentries._json, entries)))  # fmt: skip

    encode, decode = msgspec.json.Encoder().encode, msgspec.json.Decoder().decode
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    pair("json.dumps / msgspec, no check", n,
         lambda: [json.dumps(v, **compact).encode() for v in values],  # type: ignore[arg-type]
         lambda: list(map(encode, values)))  # fmt: skip
    pair("json.loads / msgspec, no check", n, lambda: [json.loads(d) for d in data],
         lambda: list(map(decode, data)))  # fmt: skip


def queries(names: list[str], n: int, runs: int) -> None:
    """``rstreams.run`` of each Nexmark query in memory, with the json module's serde
    and table writer and with rstreams' own."""
    data = StdlibJsonSerde().serialize_many(list(events(n)))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "events.jsonl")
        with open(path, "wb") as f:
            f.writelines(d + b"\n" for d in data)
        print(f"\n{'rstreams.run in memory':34} {'json s':>9} {'now s':>9} {'ratio':>7}")
        for q in names:
            module = _load(ROOT / "examples" / "nexmark" / f"{q}.py", f"nexmark_{q}")
            topology = module.build().build()

            def go(topology: Any = topology) -> list[str]:
                tables = rstreams.run(topology, {"events": path}).tables.values()
                return [line for table in tables for line in results.table_lines(table)]

            def go_old(go: Callable[[], list[str]] = go) -> list[str]:
                with stdlib_json():
                    return go()

            assert go_old() == go(), q
            t_old, t_new = best(go_old, runs), best(go, runs)
            print(f"{q:34} {t_old:9.2f} {t_new:9.2f} {t_old / t_new:7.2f}", flush=True)


if __name__ == "__main__":
    main()
