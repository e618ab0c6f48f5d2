"""The file log shared by several processes: concurrent appends, tailing readers, commits, kill -9.

(Named ``test_filelog_processes`` because tests/unit/test_filelog.py exists and the test
directories are not packages: two test modules may not share a basename.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rstreams.runtime.engine.operators.producer import Producer
from rstreams.runtime.queues import FileBroker

pytestmark = pytest.mark.fast  # in ./dev test --fast (see pyproject.toml's markers)

WRITER = textwrap.dedent(
    """
    import json, random, sys
    from rstreams.runtime.queues import FileBroker

    root, wid, batches, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    seq = 0
    bases = []
    with FileBroker(root, segment_bytes=4096, index_interval_bytes=256) as b:
        b.create_topic("shuffle", 2)
        for _ in range(batches):
            n = rng.randint(1, 20)
            batch = []
            for _ in range(n):
                v = json.dumps([wid, seq]).encode()
                batch.append((seq, b"w%d" % wid, v, (("writer", b"%d" % wid),)))
                seq += 1
            bases.append((b.append("shuffle", 0, batch), n))
    print(json.dumps(bases))
    """
)

COMMITTER = textwrap.dedent(
    """
    import sys
    from rstreams.runtime.queues import FileBroker

    root, queue = sys.argv[1], int(sys.argv[2])
    with FileBroker(root) as b:
        for i in range(1, 41):
            b.commit("job", "shuffle", queue, i * 10 + queue)
    """
)

FOREVER = textwrap.dedent(
    """
    import sys
    from rstreams.runtime.queues import FileBroker

    with FileBroker(sys.argv[1], fsync="never", segment_bytes=20_000) as b:
        b.create_topic("t", 1)
        i = 0
        while True:
            b.append("t", 0, [(i, None, b"%d" % (i + j), ()) for j in range(50)])
            i += 50
            if i == 5000:
                print("ready", flush=True)
    """
)

CHANGELOG_WRITER = textwrap.dedent(
    """
    import sys
    from rstreams.runtime.queues import FileBroker

    with FileBroker(sys.argv[1]) as b:
        for n in range(0, 7000, 7):
            b.append("c", 0, [(i, b"k%d" % (i % 37), b"v%d" % i, ()) for i in range(n, n + 7)])
    """
)

COMPACTOR = textwrap.dedent(
    """
    import os, sys
    from rstreams.runtime.queues import FileBroker

    with FileBroker(sys.argv[1]) as b:
        removed = 0
        while not os.path.exists(sys.argv[2]):
            removed += b.compact("c", 0)
        removed += b.compact("c", 0)
    print(removed)
    """
)


def spawn(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_processes_append_to_one_queue_while_another_tails_it(tmp_path: Path) -> None:
    root = tmp_path / "log"
    batches = 150
    procs = [spawn(WRITER, root, wid, batches, wid) for wid in range(3)]
    seen = []
    with FileBroker(root) as reader:
        while reader.queue_count("shuffle") is None:
            time.sleep(0.01)
        done = False
        while True:  # tail while they write: every read is dense and whole
            pos = len(seen)
            chunk = reader.read("shuffle", 0, pos, 200)
            assert [r.offset for r in chunk] == list(range(pos, pos + len(chunk)))
            seen += chunk
            if done and not chunk and pos == reader.end_offset("shuffle", 0):
                break
            done = all(p.poll() is not None for p in procs)
            if not chunk:
                time.sleep(0.002)
        outs = [p.communicate() for p in procs]
        assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
        final = reader.read("shuffle", 0, 0)
    assert [(r.offset, r.value) for r in final] == [(r.offset, r.value) for r in seen]
    assert [r.offset for r in final] == list(range(len(final)))
    written = [json.loads(r.value) for r in final]
    per_writer: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for wid, seq in written:
        per_writer[wid].append(seq)
    for wid, seqs in per_writer.items():
        assert seqs == list(range(len(seqs))), f"writer {wid}: lost, doubled or reordered"
    assert all(r.headers == (("writer", r.key[1:]),) for r in final if r.key)
    # every append returned the offsets its records really got
    for wid, (out, _) in enumerate(outs):
        bases = json.loads(out)
        assert len(bases) == batches
        for base, n in bases:
            assert {tuple(written[o]) for o in range(base, base + n)} <= {
                (wid, s) for s in per_writer[wid]
            }
            assert all(written[o][0] == wid for o in range(base, base + n))
    assert len(list((root / "topics" / "shuffle" / "0").glob("*.log"))) > 5  # rolled under load


def test_processes_committing_one_group_keep_each_others_queues(tmp_path: Path) -> None:
    root = tmp_path / "log"
    with FileBroker(root) as b:
        b.create_topic("shuffle", 4)
    procs = [spawn(COMMITTER, root, q) for q in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    with FileBroker(root) as b:
        assert b.group_offsets("job") == {("shuffle", q): 400 + q for q in range(4)}
        assert b.groups() == ["job"]


def test_a_killed_writer_leaves_a_log_that_reopens_whole(tmp_path: Path) -> None:
    root = tmp_path / "log"
    p = spawn(FOREVER, root)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with FileBroker(root) as b:
        end = b.end_offset("t", 0)
        assert end >= 5000 and end % 50 == 0
        values = [r.value for r in b.read("t", 0, 0)]
        assert values == [b"%d" % i for i in range(end)]
        assert b.append("t", 0, [(0, None, b"after", ())]) == end
    with FileBroker(root) as b:
        assert b.read("t", 0, end)[0].value == b"after"


def test_the_engine_producer_writes_through_a_file_broker(tmp_path: Path) -> None:
    with FileBroker(tmp_path) as broker:
        broker.create_topic("out", 2)
        producer = Producer(broker)  # type: ignore[arg-type]
        producer.send("out", 1, b"k", b"v", 5, ())
        producer.send_many("out", 1, [(6, None, b"w", ())])
        assert producer.queue_count("out") == 2
        producer.flush()
        assert [(r.offset, r.value) for r in broker.read("out", 1, 0)] == [(0, b"v"), (1, b"w")]


def test_compaction_in_one_process_while_others_write_and_read(tmp_path: Path) -> None:
    root, stop = tmp_path / "log", tmp_path / "stop"
    with FileBroker(root) as b:
        b.create_topic("c", 1, compacted=True, segment_bytes=3000)
    writer = spawn(CHANGELOG_WRITER, root)
    compactor = spawn(COMPACTOR, root, stop)
    reads = 0
    with FileBroker(root) as reader:
        while writer.poll() is None or reads < 3:
            got = reader.read("c", 0, 0)  # a consistent view, whatever is being swapped
            offsets = [r.offset for r in got]
            assert offsets == sorted(set(offsets))
            assert all(
                (r.key, r.value) == (b"k%d" % (r.offset % 37), b"v%d" % r.offset) for r in got
            )
            assert len({r.key for r in got}) == min(37, offsets[-1] + 1 if got else 0)
            reads += 1
        stop.touch()
        out, err = compactor.communicate(timeout=60)
        assert writer.returncode == 0 and compactor.returncode == 0, err
        assert int(out) > 6000
        final = reader.read("c", 0, 0)
        assert reader.end_offset("c", 0) == 7000
        assert {r.key: r.offset for r in final} == {b"k%d" % (i % 37): i for i in range(7000)}
