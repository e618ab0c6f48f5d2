"""``--master spark://...``: a real Spark standalone cluster (one master, one worker) on
127.0.0.1, started from the launcher in the pyspark wheel, with ``rstreams run`` as a
subprocess against it.

Every process (master, worker, the ``rstreams`` driver, and so the executors and their
Python workers) runs with a ``python3`` and ``python`` first on PATH that fail, so a run
that passes did not silently fall back on PATH's Python anywhere. The fixture stops the
cluster by process group, also when a test fails, and then checks that nothing it
started is left.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.jvm import SPARK_DEFAULTS, SPARK_JAVA_ENV

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "data" / "corpus.txt"
WORDCOUNT = ROOT / "examples" / "wordcount.py"
RSTREAMS = Path(sys.executable).parent / "rstreams"
WORD = re.compile(r"\w+")  # examples/wordcount.py: WORD.findall(line.lower())
START_TIMEOUT = 120.0
RUN_TIMEOUT = 600.0

STUB = """#!/bin/sh
echo "test_cluster: the stub $0 on PATH was run ($*); nothing may rely on PATH's python" >&2
exit 1
"""

# Word count (as examples/wordcount.py) that also counts, under a key no word can have,
# the interpreter, prefixes and rstreams the executor's Python worker runs.
WHERE_PIPELINE = """
import os
import re
import sys

from rstreams import StreamBuilder

WORD = re.compile(r"\\w+")


def words_and_where(line):
    import rstreams

    where = {
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "cwd": os.getcwd(),
        "rstreams": rstreams.__file__,
        "pyarrow": __import__("pyarrow").__file__,
    }
    return WORD.findall(line.lower()) + ["@" + "|".join(f"{k}={v}" for k, v in where.items())]


def build():
    b = StreamBuilder("where")
    (
        b.source("sentences")
        .flatMap(words_and_where)
        .keyBy(lambda w: w)
        .count()
        .toRStream()
        .sink("word-counts")
    )
    return b
"""


def word_counts(lines: list[str]) -> dict[str, int]:
    return dict(collections.Counter(w for line in lines for w in WORD.findall(line.lower())))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class Cluster:
    root: Path
    master_url: str
    web_url: str
    work_dir: Path
    env: dict[str, str]
    ports: tuple[int, ...]

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.web_url + "/json/", timeout=5) as r:
            return dict(json.load(r))

    def rstreams(self, *args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``<venv>/bin/rstreams ARGS`` as a driver of this cluster, in its own process
        group (killed if it outlives the timeout)."""
        proc = subprocess.Popen(
            [str(RSTREAMS), *map(str, args)],
            cwd=cwd or self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            pytest.fail(f"rstreams {args} did not finish in {RUN_TIMEOUT}s:\n{err[-3000:]}")
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def executor_logs(self, tail: int = 2000) -> str:
        """The ends of the executors' stderr logs (the worker keeps them in its work dir)."""
        return "\n".join(
            f"--- {p}\n{p.read_text(errors='replace')[-tail:]}"
            for p in sorted(self.work_dir.glob("app-*/*/stderr"))
        )


def _kill_group(proc: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """SIGTERM the process group of ``proc`` (a session leader), SIGKILL what remains."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return
            time.sleep(0.2)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leftovers(root: Path, ports: tuple[int, ...]) -> list[str]:
    """Processes whose command line names ``root`` or one of ``ports``, or whose working
    directory is inside ``root`` (executors and their Python workers)."""
    alternatives = "|".join(map(str, ports))
    port = re.compile(rf"(?:^|[\s:=@])(?:{alternatives})(?:$|[\s/])")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue  # gone, or a kernel thread
        inside = cwd == str(root) or cwd.startswith(str(root) + os.sep)
        if str(root) in cmdline or port.search(cmdline) or inside:
            found.append(f"{entry.name} (cwd {cwd}): {cmdline[:300]}")
    return found


def _wait(what: str, ready: Any, procs: list[tuple[str, subprocess.Popen[Any], Path]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        for name, proc, log in procs:
            if proc.poll() is not None:
                pytest.fail(
                    f"the Spark {name} exited with {proc.returncode} while waiting for {what}:\n"
                    + log.read_text(errors="replace")[-3000:]
                )
        with contextlib.suppress(OSError, ValueError):
            if ready():
                return
        time.sleep(0.5)
    logs = "\n".join(log.read_text(errors="replace")[-2000:] for _, _, log in procs)
    pytest.fail(f"no {what} within {START_TIMEOUT:.0f}s:\n{logs}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster")
    stubs = root / "stub-bin"
    stubs.mkdir()
    for name in ("python3", "python"):
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    logs, work = root / "logs", root / "work"
    for d in (logs, work, root / "pids", root / "conf", root / "cache"):
        d.mkdir()
    home = spark_home()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "SPARK_", "PYTHON", "VIRTUAL_ENV", "RSTREAMS_"))
    }
    env.update(
        PATH=f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}",
        SPARK_HOME=str(home),
        SPARK_CONF_DIR=str(root / "conf"),  # no spark-env.sh or defaults of this machine
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(logs),
        SPARK_PID_DIR=str(root / "pids"),
        SPARK_WORKER_DIR=str(work),
        XDG_CACHE_HOME=str(root / "cache"),  # rstreams' Unicode calibration cache
        **SPARK_JAVA_ENV,
    )
    # Only the executors' Java options (tests/helpers/jvm.py), read by each driver.
    (root / "conf" / "spark-defaults.conf").write_text(SPARK_DEFAULTS)
    # The stub really is what PATH gives.
    probe = subprocess.run(["python3", "-c", "1"], env=env, capture_output=True, text=True)
    assert probe.returncode == 1 and "stub" in probe.stderr

    master_port, master_ui, worker_port, worker_ui = (free_port() for _ in range(4))
    ports = (master_port, master_ui, worker_port, worker_ui)
    launcher = str(home / "bin" / "spark-class")
    master_url = f"spark://127.0.0.1:{master_port}"
    started: list[tuple[str, subprocess.Popen[Any], Path]] = []

    def start(name: str, *args: str) -> None:
        log = logs / f"{name}.out"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [launcher, *args],
                env=env,
                cwd=root,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, for the kill below
            )
        started.append((name, proc, log))

    cluster = Cluster(
        root=root,
        master_url=master_url,
        web_url=f"http://127.0.0.1:{master_ui}",
        work_dir=work,
        env=env,
        ports=ports,
    )
    try:
        # A master and a worker: what sbin/start-master.sh and start-worker.sh run.
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(master_port),
            "--webui-port", str(master_ui),
        )  # fmt: skip
        _wait("master web UI", lambda: cluster.state()["status"] == "ALIVE", started)
        start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            master_url,
            "--host", "127.0.0.1",
            "--port", str(worker_port),
            "--webui-port", str(worker_ui),
            "--cores", "1",
            "--memory", "1g",
            "--work-dir", str(work),
        )  # fmt: skip
        _wait("registered worker", lambda: cluster.state()["aliveworkers"] == 1, started)
        yield cluster
    finally:
        for _, proc, _ in reversed(started):
            _kill_group(proc)
        left = _leftovers(root, ports)
        for line in left:  # don't leave them to the next test either
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        assert not left, "processes left behind by the cluster:\n" + "\n".join(left)


def read_table(path: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    table = {row["key"]: row["value"] for row in rows}
    assert len(table) == len(rows), "a key appears twice in the output"
    return table


def test_wordcount_on_a_standalone_cluster(cluster: Cluster) -> None:
    """The driver's own interpreter (this venv's) runs the executors' Python: a
    preinstalled environment on the executors' machine."""
    out = cluster.root / "wordcount.jsonl"
    apps_before = len(cluster.state()["completedapps"])
    r = cluster.rstreams(
        "run", WORDCOUNT,
        "--backend", "spark",
        "--master", cluster.master_url,
        "--input", CORPUS,
        "--output", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:] + cluster.executor_logs()
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    assert read_table(out) == word_counts(lines)
    assert f"done: {len(lines):,} records in" in r.stderr
    # It ran on the cluster: an application completed there, with an executor on the
    # worker (its logs in the work dir), and the master has nothing running now.
    state = cluster.state()
    names = [app["name"] for app in state["completedapps"]]
    assert len(names) == apps_before + 1 and names[-1] == "rstreams-wordcount", names
    assert state["activeapps"] == []
    assert list(cluster.work_dir.glob("app-*/*/stderr"))


def test_executors_on_paths_python3_fail_the_preflight_check(cluster: Cluster) -> None:
    """The control for the stub: executors told to run PATH's ``python3`` can't, and
    the run stops before any work, naming the interpreter."""
    out = cluster.root / "never.jsonl"
    r = cluster.rstreams(
        "run", WORDCOUNT,
        "--backend", "spark",
        "--master", cluster.master_url,
        "--conf", "spark.pyspark.python=python3",
        "--input", CORPUS,
        "--output", out,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-4000:]
    error = r.stderr.strip().splitlines()[-1]
    assert error.startswith("rstreams: error: the Spark executors could not run Python with")
    assert "'python3'" in error and cluster.master_url in error
    assert "Moving to a cluster" in error  # where to read how to fix it
    assert not out.exists()
    # It was the stub that the executor ran: its message is in the executor's log.
    app = max(cluster.work_dir.glob("app-*"))  # app-<date>-<number>: this run's
    assert "the stub" in "".join(p.read_text(errors="replace") for p in app.glob("*/stderr"))


def test_streaming_on_the_cluster_continues_from_its_checkpoint(cluster: Cluster) -> None:
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    first, second = lines[:2000], lines[2000:3500]
    inbox = cluster.root / "inbox"
    inbox.mkdir()
    checkpoint = cluster.root / "checkpoint"
    out = cluster.root / "streaming.jsonl"
    (inbox / "001.txt").write_text("\n".join(first) + "\n", encoding="utf-8")

    def run() -> subprocess.CompletedProcess[str]:
        r = cluster.rstreams(
            "run", WORDCOUNT,
            "--backend", "spark",
            "--master", cluster.master_url,
            "--streaming",
            "--checkpoint", checkpoint,
            # Streaming state has one RocksDB store per shuffle partition (Spark's default:
            # 200), fixed by the checkpoint's first run: size it to the cluster (1 core).
            "--conf", "spark.sql.shuffle.partitions=2",
            "--input", inbox,
            "--output", out,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-4000:] + cluster.executor_logs()
        return r

    r = run()
    assert read_table(out) == word_counts(first)
    assert f"done: {len(first):,} records in" in r.stderr

    (inbox / "002.txt").write_text("\n".join(second) + "\n", encoding="utf-8")
    r = run()
    assert f"done: {len(second):,} records in" in r.stderr  # only the new file was read
    assert read_table(out) == word_counts(first + second)  # every count continued
    # The executors kept the counts in Spark's RocksDB state store, as changelogs.
    assert list(checkpoint.glob("**/state/**/*.changelog"))


def test_executors_run_the_packed_environment(cluster: Cluster) -> None:
    """``rstreams spark pack-env`` archive, shipped with spark.archives: the executors'
    Python, rstreams and pyarrow all come from it (PATH's python3 is the failing stub)."""
    archive = cluster.root / "env.tar.gz"
    # Gzip level 0 (stored blocks): still a .tar.gz that Spark unpacks as any other,
    # written and unpacked in about half the time of level 1 (what is in it is the same).
    packed = subprocess.run(
        [RSTREAMS, "spark", "pack-env", "-o", archive, "--compress-level", "0"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert packed.returncode == 0, packed.stderr
    assert "checked" in packed.stderr, packed.stderr
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("rstreams-env.json"))  # type: ignore[arg-type]
    assert {"bin/python", "bin/python3"} <= names
    assert not any(n.startswith(("environment/", "/", "..")) for n in names)
    dists = manifest["distributions"]
    assert {"rstreams", "pyarrow", "pandas", "numpy", "msgpack", "mmh3", "attrs"} <= set(dists)
    assert "pyspark" not in dists and "py4j" not in dists  # Spark ships its own
    assert manifest["python"] == "bundle"

    pipeline = cluster.root / "where.py"
    pipeline.write_text(textwrap.dedent(WHERE_PIPELINE), encoding="utf-8")
    out = cluster.root / "where.jsonl"
    r = cluster.rstreams(
        "run", pipeline,
        "--backend", "spark",
        "--master", cluster.master_url,
        "--conf", f"spark.archives={archive}#environment",
        "--conf", "spark.pyspark.python=./environment/bin/python",
        "--input", CORPUS,
        "--output", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:] + cluster.executor_logs()
    table = read_table(out)
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    where = {k: v for k, v in table.items() if k.startswith("@")}
    assert {k: v for k, v in table.items() if not k.startswith("@")} == word_counts(lines)
    assert sum(where.values()) == len(lines)
    for key in where:
        seen = dict(part.split("=", 1) for part in key[1:].split("|"))
        # Spark unpacked the archive into the executor's working directory,
        # <work-dir>/<app id>/<executor id>/environment, and ran its bundled Python.
        env_dir = Path(seen["cwd"]) / "environment"
        assert Path(seen["cwd"]).parent.parent == cluster.work_dir, seen
        assert Path(seen["executable"]).parent == env_dir / "bin", seen
        assert Path(seen["prefix"]) == env_dir == Path(seen["base_prefix"]), seen
        for module in ("rstreams", "pyarrow"):
            assert Path(seen[module]).is_relative_to(env_dir / "lib"), seen


def test_pack_env_linking_the_executors_python(tmp_path: Path, monkeypatch) -> None:
    """``--link-python``: a venv-style archive whose bin/python links to a Python the
    executors have (here: this one's base interpreter); checked by starting it. The
    output path is relative to the working directory (as ``-o env.tar.gz`` gives it)."""
    from rstreams.runtime.spark.packenv import pack_env

    monkeypatch.chdir(tmp_path)
    packed = pack_env("linked.tar.gz", python="link", compresslevel=0)
    assert packed.path == tmp_path / "linked.tar.gz"
    assert packed.checked and packed.python == "link"
    assert packed.interpreter == sys._base_executable  # type: ignore[attr-defined]
    with tarfile.open(packed.path) as tar:
        python = tar.getmember("bin/python")
        cfg = tar.extractfile("pyvenv.cfg").read().decode()  # type: ignore[union-attr]
        names = tar.getnames()
    assert python.issym() and python.linkname == packed.interpreter
    assert f"home = {Path(packed.interpreter).parent}" in cfg
    assert not any("/lib-dynload/" in n for n in names)  # no standard library inside
    assert packed.spark_conf("hdfs:///envs/e.tar.gz") == {
        "spark.archives": "hdfs:///envs/e.tar.gz#environment",
        "spark.pyspark.python": "./environment/bin/python",
    }
