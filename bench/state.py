"""State benchmarks, as ratios measured in one run.

    python bench/state.py [--keys 1000000]

1. Restore: a changelog of --keys keys (msgpack string keys, int values) on the file log
   is restored into a fresh RocksDB store by a Task (what a worker does on assignment);
   keys/s are compared with writing the same keys straight into rocksdict with
   WriteBatches of the same size and default options (target: ratio >= 0.5). The store
   runs with RocksDB's WAL off (the changelog is the durable record), so a raw ingest
   with the WAL off is printed too, for reference.
2. Restore from a valid local checkpoint after 1% more updates: only the tail is replayed.

Each figure is the best of three runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rstreams import StreamBuilder
from rstreams.runtime.engine.coordination.local import create_topics, wall_clock_ms
from rstreams.runtime.engine.operators.context import EngineConfig
from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.engine.tasks.task import Task
from rstreams.runtime.queues.filelog import FileBroker
from rstreams.serde import INTERNAL_SERDE


def topology():
    b = StreamBuilder("bench")
    b.source("in", queues=1).keyBy(lambda v: v).count(name="c", queues=1).sink("out")
    return b.build()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.keys
    keys = [INTERNAL_SERDE.serialize(f"key-{i}") for i in range(n)]
    values = [INTERNAL_SERDE.serialize(i) for i in range(n)]
    batch = 10_000
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        # Baseline: raw rocksdict WriteBatch ingest, default options (the WAL on); and,
        # for reference, with the WAL off as the store runs it.
        from rocksdict import Options, Rdict, WriteBatch, WriteOptions

        def raw_ingest(path: Path, wal: bool) -> float:
            opts = Options(raw_mode=True)
            opts.create_if_missing(True)
            db = Rdict(str(path), opts)
            write_opts = WriteOptions()
            write_opts.disable_wal = not wal  # type: ignore[assignment,method-assign]
            t0 = time.perf_counter()
            for i in range(0, n, batch):
                wb = WriteBatch(raw_mode=True)
                for k, v in zip(keys[i : i + batch], values[i : i + batch]):
                    wb.put(k, v)
                db.write(wb, write_opts)
            took = time.perf_counter() - t0
            db.close()
            return took

        topo = topology()
        broker = FileBroker(tmp / "log")
        create_topics(topo, broker, EngineConfig())
        changelog = "bench-c-changelog"
        for i in range(0, n, batch):
            broker.append(
                changelog,
                0,
                [(0, k, v, ()) for k, v in zip(keys[i : i + batch], values[i : i + batch])],
            )
        broker.flush()
        sub = topo.subtopologies[1]

        def restore(state_dir: Path) -> tuple[float, int]:
            cfg = EngineConfig(state="rocksdb", state_dir=str(state_dir))
            task = Task(topo, sub, 0, broker, Producer(broker), cfg, "bench", wall_clock_ms)
            for s in task.stores.values():
                s.close(flush=False)
            return task.restore_seconds, task.restored

        # Best of three runs of each, interleaved (a shared VM is noisy).
        runs = [
            (
                raw_ingest(tmp / f"raw{r}", wal=True),
                raw_ingest(tmp / f"raw-nowal{r}", wal=False),
                restore(tmp / f"state{r}"),
            )
            for r in range(3)
        ]
        t_raw = min(r[0] for r in runs)
        t_raw_nowal = min(r[1] for r in runs)
        t_restore = min(r[2][0] for r in runs)
        assert all(r[2][1] == n for r in runs)
        extra = max(1, n // 100)
        broker.append(changelog, 0, [(0, keys[i], values[i], ()) for i in range(extra)])
        broker.flush()
        t_tail, tail = restore(tmp / "state0")
        broker.close()

    print(f"keys: {n:,}")
    print(f"{'':36}{'seconds':>9}{'keys/s':>14}{'ratio':>8}")
    print(f"{'rocksdict WriteBatch ingest (base)':36}{t_raw:9.2f}{n / t_raw:14,.0f}{1:8.3f}")
    print(
        f"{'  same, WAL off (reference)':36}{t_raw_nowal:9.2f}{n / t_raw_nowal:14,.0f}"
        f"{t_raw / t_raw_nowal:8.3f}"
    )
    print(
        f"{'restore from changelog (full)':36}{t_restore:9.2f}{n / t_restore:14,.0f}"
        f"{t_raw / t_restore:8.3f}"
    )
    print(
        f"{'restore from checkpoint (+1% tail)':36}{t_tail:9.2f}{'':>14}"
        f"   replayed {tail:,} records"
    )


if __name__ == "__main__":
    main()
