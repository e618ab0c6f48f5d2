"""A job id names a directory under the data directory: every command that takes one
refuses ``../victim``, an absolute path or a name with ``/`` (exit 2), and writes
nothing, anywhere. Before, ``rstreams topics create zz --job ../../victim`` made
``a/victim/log/topics/zz`` outside the data directory ``a/b``."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rstreams.cli import build_parser, main
from rstreams.runtime.layout import JobLayout, check_job_id

BAD = ["../../victim", "/tmp/victim", "a/victim", "..", ".hidden", ""]


def _commands_taking_a_job() -> list[tuple[str, list[str]]]:
    """Every command (from the parser, so a new one is covered) with a JOB argument or
    --job, and positionals that parse."""
    parser = build_parser("every-command")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for name, p in sorted(sub.choices.items()):
        dests = {a.dest for a in p._actions}
        if "job" not in dests:
            continue
        positionals = [
            a for a in p._actions if not a.option_strings and a.dest not in ("job", "help")
        ]
        # (a command with actions: the one that writes, if any, as topics create)
        args = [str(_writing(list(a.choices)) if a.choices else "x")
                for a in positionals if a.nargs not in ("?", "*")]  # fmt: skip
        found.append((name, args))
    return found


def _writing(choices: list[str]) -> str:
    return next((c for c in ("create", "repair", "reset") if c in choices), choices[-1])


COMMANDS = _commands_taking_a_job()


def test_the_admin_commands_and_top_are_covered() -> None:
    names = {name for name, _ in COMMANDS}
    assert {"topics", "produce", "consume", "offsets", "state", "group", "top"} <= names


@pytest.mark.parametrize(("command", "args"), COMMANDS, ids=[c for c, _ in COMMANDS])
@pytest.mark.parametrize("job", BAD[:3])
def test_a_job_id_that_is_a_path_is_refused_and_nothing_is_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    args: list[str],
    job: str,
) -> None:
    data = tmp_path / "a" / "b"
    data.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    is_positional = command == "top"
    argv = [command, *args, "--data-dir", str(data)]
    argv += [job] if is_positional else ["--job", job]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid job id {job!r}" in err, err
    assert sorted(tmp_path.rglob("*")) == before
    assert not Path("/tmp/victim").exists() or job != "/tmp/victim"


@pytest.mark.parametrize("job", BAD)
def test_a_layout_refuses_a_job_id_that_is_not_one(tmp_path: Path, job: str) -> None:
    with pytest.raises(ValueError, match="invalid job id"):
        JobLayout.of(tmp_path, job)


def test_job_ids_of_pipelines_pass() -> None:
    for job in ("wordcount", "wc-2", "Shop.enrich_v1", "7days"):
        assert check_job_id(job) == job
        assert JobLayout.of("d", job).root == Path("d") / job


@pytest.mark.parametrize("argv", [["top", "--once"], ["topics", "list"]])
def test_a_directory_named_as_no_job_id_is_no_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A directory with a log but a name no command could give (``my job``) is not
    listed as a job, so a command without JOB says so in one line (no traceback)."""
    for name in ("my job", ".hidden"):
        (tmp_path / name / "log").mkdir(parents=True)
    assert JobLayout.jobs(tmp_path) == []
    code = main([*argv, "--data-dir", str(tmp_path)])
    assert code in (1, 2)
    assert "no job has run in" in capsys.readouterr().err
