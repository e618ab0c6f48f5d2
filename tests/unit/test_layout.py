"""JobLayout and GroupLayout: every path of a job's directory, named in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rstreams
from rstreams.runtime.layout import GroupLayout, JobLayout, store_dir


def test_the_paths_of_a_job() -> None:
    job = JobLayout.of("/data", "wc")
    assert job == JobLayout(Path("/data/wc"), "wc") == JobLayout.at("/data/wc")
    assert job.data_dir == Path("/data")
    assert job.lock == Path("/data/.wc.lock")  # beside the job's directory
    assert job.log == Path("/data/wc/log")
    assert job.state == Path("/data/wc/state")
    assert job.worker_log(3) == Path("/data/wc/logs/worker-3.log")
    assert job.logs == job.worker_log(3).parent
    assert job.topology == Path("/data/wc/topology.json")
    assert job.needs_rebuild == Path("/data/wc/needs-rebuild.json")
    assert job.coordination == job.group("wc") == GroupLayout("/data/wc/coordination/wc")
    assert job.group("other").dir == Path("/data/wc/coordination/other")


def test_the_paths_of_a_group() -> None:
    g = GroupLayout.of("/d/wc", "wc")
    assert g.dir == Path("/d/wc/coordination/wc")
    assert g.generation == g.dir / "generation"
    assert g.coordinator_lock == g.dir / "coordinator.lock"
    assert g.member_lock("w0-1") == g.dir / "members" / "w0-1.lock"
    assert g.member_info("w0-1") == g.dir / "members" / "w0-1.json"
    assert g.member_joining("w0-1", 42).parent == g.members
    assert g.task_lock("1_0") == g.dir / "tasks" / "1_0.lock"
    assert g.eoi_declared(1) == g.dir / "eoi" / "1"
    assert g.eoi_done("1_0") == g.dir / "eoi" / "1_0.done"
    assert g.restore_file("1_0") == g.dir / "restore" / "1_0"
    assert g.skipped_file("1_0") == g.dir / "skipped" / "1_0"
    assert g.supervisor_stats == g.dir / "stats" / "supervisor.json"
    assert g.worker_stats("w0-1") == g.dir / "stats" / "worker-w0-1.json"


def test_listings_find_what_the_paths_name(tmp_path: Path) -> None:
    job = JobLayout.of(tmp_path, "wc")
    g = job.coordination
    for path in (g.member_lock("a"), g.member_info("a"), g.member_joining("b", 1)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    for path in (g.task_lock("2_0"), g.task_lock("1_0"), g.worker_stats("b"), g.worker_stats("a")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    g.supervisor_stats.touch()
    g.restore_file("1_0").parent.mkdir(parents=True)
    g.restore_file("1_0").touch()
    (g.restore / ".1_0.123.tmp").touch()  # being written: not listed
    assert g.listed_members() == ["a"]  # not the one still joining
    assert g.listed_tasks() == ["1_0", "2_0"]
    assert g.worker_stats_files() == [g.worker_stats("a"), g.worker_stats("b")]
    assert g.restore_files() == [g.restore_file("1_0")]
    for store, queue in (("s-store", 0), ("s-store", 1), ("t-store", 0)):
        store_dir(job.state, store, queue).mkdir(parents=True)
    assert job.store_dirs(0) == [job.state / "s-store" / "0", job.state / "t-store" / "0"]


def test_jobs_are_the_directories_with_a_log(tmp_path: Path) -> None:
    assert JobLayout.jobs(tmp_path / "nothing") == []
    for name in ("b", "a"):
        JobLayout.of(tmp_path, name).log.mkdir(parents=True)
    (tmp_path / "not-a-job").mkdir()
    assert JobLayout.jobs(tmp_path) == ["a", "b"]


def test_a_log_knows_its_job() -> None:
    assert JobLayout.of_log("/data/wc/log") == JobLayout.of("/data", "wc")
    assert JobLayout.of_log(JobLayout.of("/d", "x").log) == JobLayout.of("/d", "x")
    assert JobLayout.of_log("/data/wc/elsewhere") is None


def test_a_layout_is_frozen() -> None:
    job = JobLayout.of("/data", "wc")
    with pytest.raises(AttributeError):
        job.job = "other"  # type: ignore[misc]


#: Names of a job's files and directories that only the layout module may spell.
_NAMES = {
    "coordination", "eoi", "restore", "skipped", "stats", "logs", "members", "tasks",
    "generation", "coordinator.lock", "supervisor.json", "topology.json",
    "needs-rebuild.json",
}  # fmt: skip


def test_no_other_module_spells_the_layout() -> None:
    """Path joins with a layout name (``x / "eoi"``, ``x / "coordination" / job``) are
    the layout module's alone."""
    package = Path(rstreams.__file__).resolve().parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Div)
                and isinstance(node.right, ast.Constant)
                and node.right.value in _NAMES | {"log", "state"}
            ):
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []


@pytest.mark.parametrize(
    "name", ["eos", "q5.v2", "a-b_c", "9", "", "-x", ".x", "a/b", "../v", "a b"]
)
def test_a_job_id_is_what_the_builder_takes_for_a_name(name: str) -> None:
    """The layout can import nothing (it sits below the DSL), so it keeps its own copy
    of the DSL's rule for names: the two take and refuse the same names."""
    from rstreams.dsl.nodes import check_name
    from rstreams.errors import TopologyError
    from rstreams.runtime.layout import check_job_id

    def takes(check, error) -> bool:
        try:
            check()
        except error:
            return False
        return True

    assert takes(lambda: check_job_id(name), ValueError) == takes(
        lambda: check_name(name, "name"), TopologyError
    )
