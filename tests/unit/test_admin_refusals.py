"""The CLI refuses what it can not honour: exit code 2 and a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from rstreams.cli import main

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
CORPUS = ROOT / "examples" / "data" / "corpus.txt"


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    """A data directory holding one job, 'scratch', with a topic 'notes'."""
    d = str(tmp_path / "data")
    assert main(["topics", "create", "notes", "--job", "scratch", "--data-dir", d, "-q"]) == 0
    return d


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("rstreams: error: ")
    return err


@pytest.mark.parametrize("name", ["a/b", "../x", "..", "x..y", ""])
def test_topics_create_and_describe_refuse_bad_names(capsys, data_dir, name):
    for action in ("create", "describe"):
        err = refused(capsys, ["topics", action, name, "--job", "scratch", "--data-dir", data_dir])
        assert f"invalid topic name {name!r}" in err
        assert "no '/'" in err
    assert not (Path(data_dir) / "x").exists()


@pytest.mark.parametrize("name", ["a/b", "../escape", ""])
def test_produce_and_consume_refuse_bad_names(capsys, data_dir, name, monkeypatch):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"hello\n")))
    err = refused(capsys, ["produce", name, "--job", "scratch", "--data-dir", data_dir])
    assert f"invalid topic name {name!r}" in err
    err = refused(capsys, ["consume", name, "--job", "scratch", "--data-dir", data_dir])
    assert f"invalid topic name {name!r}" in err
    assert not (Path(data_dir).parent / "escape").exists()


def test_consume_refuses_a_negative_offset(capsys, data_dir):
    err = refused(
        capsys, ["consume", "notes", "--offset", "-3", "--job", "scratch", "--data-dir", data_dir]
    )
    assert "--offset must be >= 0; got -3" in err


def test_group_describe_refuses_an_unknown_group(capsys, data_dir):
    err = refused(capsys, ["group", "describe", "nope", "--job", "scratch", "--data-dir", data_dir])
    assert "group 'nope' does not exist in job 'scratch'" in err
    assert not (Path(data_dir) / "scratch" / "coordination" / "nope").exists()


def test_group_describe_of_a_group_with_offsets(capsys, data_dir, monkeypatch):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\nb\n")))
    assert main(["produce", "notes", "--job", "scratch", "--data-dir", data_dir, "-q"]) == 0
    base = ["--job", "scratch", "--data-dir", data_dir]
    assert main(["consume", "notes", "--group", "audit", "--from-beginning", *base]) == 0
    capsys.readouterr()
    assert main(["group", "describe", "audit", *base]) == 0
    out = capsys.readouterr().out
    assert "group audit: generation" in out and "notes\t0\t2\t2\t0" in out


@pytest.mark.parametrize("workers", ["0", "-2"])
def test_run_refuses_workers_below_one(capsys, tmp_path, workers):
    err = refused(
        capsys,
        ["run", str(WORDCOUNT), "--input", str(CORPUS), "--workers", workers,
         "--data-dir", str(tmp_path / "d")],
    )  # fmt: skip
    assert f"--workers must be >= 1; got {workers}" in err
    assert not (tmp_path / "d").exists()


def test_run_refuses_a_negative_top(capsys, tmp_path):
    err = refused(
        capsys,
        ["run", str(WORDCOUNT), "--input", str(CORPUS), "--top", "-1",
         "--data-dir", str(tmp_path / "d")],
    )  # fmt: skip
    assert "--top must be >= 0; got -1" in err
