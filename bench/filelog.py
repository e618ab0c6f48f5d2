"""File log throughput: FileBroker vs MemoryBroker appending and reading small records.

    python bench/filelog.py [--records 1000000] [--batch 1000] [--fsync commit] [--dir DIR]

Appends --records records of about 30 bytes (8-byte key, 20-byte value, no headers) in
batches of --batch to one queue, then reads them all back in reads of --batch records,
on the MemoryBroker and on a FileBroker in a fresh directory (a temporary one unless
--dir), and prints records/s for each phase and the file/memory ratio. Also times a
cold read (a new FileBroker on the same files: index load, page cache only), a read
as columns (what the engine reads: no object per record), and checks that the records
read back are the ones written. Nothing here is asserted on time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rstreams.runtime.queues import FileBroker, MemoryBroker


def batches(records: int, batch: int) -> list[list[tuple]]:
    out = []
    for start in range(0, records, batch):
        out.append(
            [
                (i, b"key%05d" % (i % 100_000), b"value-%014d" % i, ())
                for i in range(start, min(start + batch, records))
            ]
        )
    return out


def run(
    broker: MemoryBroker | FileBroker, data: list[list[tuple]], batch: int
) -> tuple[float, float]:
    broker.create_topic("bench", 1)
    t0 = time.perf_counter()
    for b in data:
        broker.append("bench", 0, b)
    if isinstance(broker, FileBroker):
        broker.flush()  # what a commit would pay
    t1 = time.perf_counter()
    n = read_all(broker, batch)
    t2 = time.perf_counter()
    assert n == sum(map(len, data))
    return t1 - t0, t2 - t1


def read_all(broker: MemoryBroker | FileBroker, batch: int) -> int:
    pos = 0
    while chunk := broker.read("bench", 0, pos, batch):
        assert chunk[0].offset == pos
        pos += len(chunk)
    return pos


def read_all_columns(broker: FileBroker, batch: int) -> int:
    pos = 0
    while len(chunk := broker.read_columns("bench", 0, pos, batch)):
        assert chunk.offsets[0] == pos
        pos += len(chunk)
    return pos


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--fsync", default="commit", choices=["always", "commit", "never"])
    ap.add_argument("--dir", type=Path, help="where the file log goes (default: a temp dir)")
    args = ap.parse_args()
    data = batches(args.records, args.batch)
    n = args.records

    mem_w, mem_r = run(MemoryBroker(), data, args.batch)
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        with FileBroker(root, fsync=args.fsync) as fb:
            file_w, file_r = run(fb, data, args.batch)
            check = fb.read("bench", 0, n // 2, 1)[0]
            assert (check.key, check.value) == data[n // 2 // args.batch][n // 2 % args.batch][1:3]
        size = sum(p.stat().st_size for p in Path(root).rglob("*.log"))
        with FileBroker(root, fsync=args.fsync) as fb:
            t0 = time.perf_counter()
            read_all(fb, args.batch)
            cold_r = time.perf_counter() - t0
        with FileBroker(root, fsync=args.fsync) as fb:
            t0 = time.perf_counter()
            assert read_all_columns(fb, args.batch) == n
            cols_r = time.perf_counter() - t0

    print(f"{n:,} records of ~30 bytes in batches of {args.batch}; fsync={args.fsync}")
    print(f"file log: {size / 1e6:.1f} MB on disk ({size / n:.1f} bytes/record)")
    print(f"{'':14}{'memory rec/s':>16}{'file rec/s':>16}{'file/memory':>14}")
    for name, m, f in (
        ("append", mem_w, file_w),
        ("read", mem_r, file_r),
        ("read (new)", mem_r, cold_r),
        ("read columns", mem_r, cols_r),
    ):
        print(f"{name:14}{n / m:>16,.0f}{n / f:>16,.0f}{m / f:>14.3f}")


if __name__ == "__main__":
    main()
