"""The CLI checks what a command will write before it does any work, refuses with one
line (exit 2) naming the path, and words its hints for the command line."""

from __future__ import annotations

import io
import json
import sys
import textwrap
from pathlib import Path

import pytest

from rstreams.cli import main

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def words(tmp_path: Path) -> Path:
    return write(tmp_path / "words.txt", "a b\nb\n")


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("rstreams: error: ") and err.count("\n") == 1, err
    return err


# -- output paths, checked before any work -----------------------------------------------


def test_run_refuses_an_output_that_is_a_directory(capsys, tmp_path, words):
    out = tmp_path / "outdir"
    out.mkdir()
    data = tmp_path / "data"
    err = refused(capsys, ["run", WORDCOUNT, "--input", words, "--output", out, "--data-dir", data])
    assert f"--output {str(out)!r} is a directory" in err
    assert not data.exists(), "the run started before refusing"
    assert list(tmp_path.glob(".outdir*")) == [] and list(out.iterdir()) == []


def test_run_refuses_an_output_under_a_regular_file(capsys, tmp_path, words):
    out = words / "counts.jsonl"
    data = tmp_path / "data"
    err = refused(capsys, ["run", WORDCOUNT, "--input", words, "--output", out, "--data-dir", data])
    assert f"--output {str(out)!r}: {str(words)!r} is a file, not a directory" in err
    assert not data.exists()


def test_run_refuses_an_output_whose_directory_is_missing(capsys, tmp_path, words):
    out = tmp_path / "no" / "such" / "counts.jsonl"
    err = refused(capsys, ["run", "--in-memory", WORDCOUNT, "--input", words, "--output", out])
    assert f"directory {str(out.parent)!r} does not exist; create it first" in err
    assert not (tmp_path / "no").exists(), "the missing directory was created"


def test_run_refuses_a_data_dir_that_is_a_file(capsys, tmp_path, words):
    err = refused(capsys, ["run", WORDCOUNT, "--input", words, "--data-dir", words])
    assert f"--data-dir {str(words)!r} is a file; give a directory" in err


# -- data directories that can not be used, for every command that takes --data-dir ---------

DATA_DIR_COMMANDS = [
    ["run", WORDCOUNT, "--input", "WORDS"],
    ["topics", "list"],
    ["topics", "create", "t", "--job", "wc"],
    ["produce", "t", "--job", "wc"],
    ["consume", "t", "--from-beginning"],
    ["offsets", "wc"],
    ["group", "describe", "wc"],
    ["state", "list"],
    ["top", "--once"],
]


def data_dir_argv(argv: list, words: Path, data: Path) -> list:
    return [words if a == "WORDS" else a for a in argv] + ["--data-dir", data]


@pytest.mark.parametrize("argv", DATA_DIR_COMMANDS, ids=lambda a: " ".join(map(str, a[:2])))
def test_a_data_dir_under_a_file_is_refused(capsys, monkeypatch, tmp_path, words, argv):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x\n")))
    data = words / "jobs"
    err = refused(capsys, data_dir_argv(argv, words, data))
    assert f"--data-dir {str(data)!r} is under the file {str(words)!r}; give a directory" in err


@pytest.mark.parametrize("argv", DATA_DIR_COMMANDS, ids=lambda a: " ".join(map(str, a[:2])))
def test_a_data_dir_that_is_a_file_is_refused(capsys, monkeypatch, tmp_path, words, argv):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x\n")))
    err = refused(capsys, data_dir_argv(argv, words, words))
    assert f"--data-dir {str(words)!r} is a file; give a directory" in err


@pytest.fixture(scope="module")
def read_only_dir(tmp_path_factory):
    """A directory on a read-only mount holding a job's log (a read-only tmpfs can not
    hold one, so a read-only bind mount of a written directory): chmod does not stop
    root, a read-only mount does. Needs root (mount); skipped with the reason otherwise."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("a read-only mount needs root (chmod alone does not stop root)")
    base = tmp_path_factory.mktemp("ro")
    src, mnt = base / "src", base / "mnt"
    src.mkdir()
    mnt.mkdir()
    sys_stdin = sys.stdin
    try:
        sys.stdin = io.TextIOWrapper(io.BytesIO(b"x\n"))
        assert main(["produce", "t", "--job", "wc", "--data-dir", str(src), "-q"]) == 0
    finally:
        sys.stdin = sys_stdin
    r = subprocess.run(["mount", "--bind", "-o", "ro", src, mnt], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"can not make a read-only bind mount: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", mnt], check=True)


@pytest.mark.parametrize("argv", DATA_DIR_COMMANDS, ids=lambda a: " ".join(map(str, a[:2])))
@pytest.mark.parametrize("below", [False, True], ids=["the dir", "a dir to create"])
def test_a_read_only_data_dir_is_refused(capsys, monkeypatch, read_only_dir, words, argv, below):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x\n")))
    data = read_only_dir / "sub" if below else read_only_dir
    if argv[:2] == ["state", "list"] and not below:
        # Reading stores writes nothing: a read-only copy of a job can still be looked at.
        assert main([str(a) for a in data_dir_argv(argv, words, data)]) == 0
        return
    if below and argv[0] not in ("run", "produce") and argv[:2] != ["topics", "create"]:
        # Nothing to read and nothing to create: that is the error (a usage error, top's
        # "no such job" too).
        code = main([str(a) for a in data_dir_argv(argv, words, data)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith("rstreams: error: no job has run in") and err.count("\n") == 1
        return
    err = refused(capsys, data_dir_argv(argv, words, data))
    what = "is not writable"
    if below:
        what = f"can not be created: {str(read_only_dir)!r} {what}"
    assert f"--data-dir {str(data)!r} {what} (read-only file system or no permission)" in err


def test_graph_refuses_an_output_whose_directory_is_missing(capsys, tmp_path):
    out = tmp_path / "pictures" / "wc.dot"
    err = refused(capsys, ["graph", WORDCOUNT, "-o", out])
    assert f"-o {str(out)!r}: directory {str(out.parent)!r} does not exist" in err
    assert not out.parent.exists()
    out.parent.mkdir()
    assert main(["graph", str(WORDCOUNT), "-o", str(out), "-q"]) == 0
    assert out.read_text().startswith("digraph")


def test_spark_pack_env_refuses_an_output_under_a_regular_file(capsys, tmp_path, words):
    out = words / "env.tar.gz"
    err = refused(capsys, ["spark", "pack-env", "-o", out])
    assert f"-o {str(out)!r}: {str(words)!r} is a file, not a directory" in err


def test_a_failed_table_write_leaves_no_temp_file(tmp_path):
    from rstreams.errors import RStreamsError
    from rstreams.runtime.results import write_table

    target = tmp_path / "taken"
    target.mkdir()  # (renaming a file onto a directory fails after the temp file is written)
    with pytest.raises(RStreamsError, match="could not write"):
        write_table({"a": 1}, str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


# -- hints and dead letters of the command line --------------------------------------------


def test_a_failed_record_hints_at_the_command_line_option(capsys, tmp_path, failing_pipeline):
    p = failing_pipeline(tmp_path / "div.py")
    data = write(tmp_path / "n.txt", "1\n0\n")
    assert main(["run", "--in-memory", str(p), "--input", str(data)]) == 1
    err = capsys.readouterr().err
    assert "ZeroDivisionError" in err
    assert "--on-error skip" in err and "--on-error dead-letter" in err
    assert "on_error=" not in err


def test_a_failed_record_keeps_the_api_hint_in_python(tmp_path, failing_pipeline):
    from rstreams import run
    from rstreams.errors import ProcessingError
    from rstreams.loader import load_topology

    topology = load_topology(str(failing_pipeline(tmp_path / "div.py")))
    data = write(tmp_path / "n.txt", "1\n0\n")
    with pytest.raises(ProcessingError, match=r"set on_error='skip' or 'dead-letter'"):
        run(topology, {"numbers": str(data)})


def test_in_memory_dead_letters_are_printed(capsys, tmp_path, failing_pipeline):
    p = failing_pipeline(tmp_path / "div.py")
    data = write(tmp_path / "n.txt", "1\n0\n2\n0\n")
    code = main(["run", "--in-memory", str(p), "--input", str(data), "--on-error", "dead-letter"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "rstreams: 2 dead letter(s)" in err and "--dead-letters PATH" in err
    letters = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [(d["offset"], d["value"]) for d in letters] == [(1, "0"), (3, "0")]
    assert all(d["error"].startswith("ZeroDivisionError") for d in letters)
    assert "2 dead-lettered" in err


def test_in_memory_dead_letters_are_written_to_a_file(capsys, tmp_path, failing_pipeline):
    p = failing_pipeline(tmp_path / "div.py")
    data = write(tmp_path / "n.txt", "1\n0\n2\n0\n")
    out, dead = tmp_path / "sums.jsonl", tmp_path / "dead.jsonl"
    argv = ["run", "--in-memory", p, "--input", data, "--on-error", "dead-letter"]
    code = main([str(a) for a in [*argv, "--output", out, "--dead-letters", dead]])
    err = capsys.readouterr().err
    assert code == 0, err
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(d["step"], d["topic"], d["offset"]) for d in letters] == [
        ("numbers-map-1", "numbers", 1),
        ("numbers-map-1", "numbers", 3),
    ]
    assert f"2 dead-lettered to {dead}" in err and "{" not in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--in-memory"], "--dead-letters writes the records that failed: it needs --on-error"),
        (
            ["--on-error", "dead-letter"],
            "the durable runtime keeps dead letters in the topic 'div-dead-letter'",
        ),
    ],
)
def test_dead_letters_option_refusals(capsys, tmp_path, failing_pipeline, flags, message):
    p = failing_pipeline(tmp_path / "div.py")
    data = write(tmp_path / "n.txt", "1\n")
    argv = ["run", p, "--input", data, "--dead-letters", tmp_path / "d.jsonl", *flags]
    err = refused(capsys, [*argv, "--data-dir", tmp_path / "data"])
    assert message in err
    assert not (tmp_path / "data").exists()


# -- a pipeline without a sink --------------------------------------------------------------


def test_a_pipeline_without_a_sink_is_warned_about(capsys, tmp_path):
    p = write(
        tmp_path / "nosink.py",
        """
        from rstreams import StreamBuilder
        def build():
            b = StreamBuilder("nosink")
            b.source("lines").map(str.upper).foreach(lambda v: None)
            return b
        """,
    )
    data = write(tmp_path / "in.txt", "a\nb\n")
    assert main(["run", "--in-memory", str(p), "--input", str(data)]) == 0
    err = capsys.readouterr().err
    assert "rstreams: warning: pipeline 'nosink' has no sink" in err
    assert "writes no topic and no table" in err and ".sink(TOPIC)" in err
    assert "2 records in, 0 out" in err
    # A pipeline with a sink is not warned about.
    assert main(["run", "--in-memory", str(WORDCOUNT), "--input", str(data)]) == 0
    assert "warning" not in capsys.readouterr().err


# -- admin commands infer the job ------------------------------------------------------------


@pytest.fixture
def two_jobs(tmp_path: Path, monkeypatch) -> str:
    """Jobs 'alpha' (topics 'shared', 'only-alpha') and 'beta' (topic 'shared')."""
    d = str(tmp_path / "data")
    for job, topic in (("alpha", "shared"), ("alpha", "only-alpha"), ("beta", "shared")):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f"{job}\n".encode())))
        assert main(["produce", topic, "--job", job, "--data-dir", d, "-q"]) == 0
    return d


def test_consume_infers_the_only_job_with_the_topic(capsys, two_jobs):
    capsys.readouterr()
    assert main(["consume", "only-alpha", "--from-beginning", "--data-dir", two_jobs]) == 0
    assert capsys.readouterr().out == "alpha\n"
    assert main(["topics", "describe", "only-alpha", "--data-dir", two_jobs]) == 0
    assert capsys.readouterr().out.startswith("topic only-alpha: 1 queues")


def test_consume_of_a_topic_of_several_jobs_lists_them(capsys, two_jobs):
    err = refused(capsys, ["consume", "shared", "--data-dir", two_jobs])
    assert "several jobs in" in err and "have the topic 'shared': alpha, beta" in err
    assert "--job" in err
    err = refused(capsys, ["consume", "nowhere", "--data-dir", two_jobs])
    assert "no job in" in err and "the topic 'nowhere' (its jobs: alpha, beta)" in err


def test_offsets_and_group_infer_the_job_with_the_group(capsys, two_jobs):
    argv = ["consume", "only-alpha", "--group", "audit", "--from-beginning", "--job", "alpha"]
    assert main([*argv, "--data-dir", two_jobs]) == 0
    capsys.readouterr()
    assert main(["offsets", "audit", "--data-dir", two_jobs]) == 0
    assert "only-alpha\t0\t1\t1\t0" in capsys.readouterr().out
    assert main(["group", "describe", "audit", "--data-dir", two_jobs]) == 0
    assert capsys.readouterr().out.startswith("group audit: generation")
    err = refused(capsys, ["offsets", "nobody", "--data-dir", two_jobs])
    assert "the group 'nobody' (its jobs: alpha, beta)" in err
