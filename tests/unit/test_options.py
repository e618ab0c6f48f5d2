"""Every option is declared once (rstreams.options): the command line, the run and the
workers take its default and check from that declaration, and the workers' typed
configuration survives JSON with every check."""

from __future__ import annotations

import argparse
import inspect

import attrs
import pytest

from rstreams import cli_run
from rstreams.cli import build_parser
from rstreams.cli_run import RUN_OPTIONS, RunCommandOptions
from rstreams.config import ALLOCATIONS, RunConfig, WorkerConfig
from rstreams.errors import ConfigError
from rstreams.options import cli_default, declared, flagged, from_json, parse_flags, to_json
from rstreams.runtime.engine.coordination import worker
from rstreams.runtime.engine.coordination.launch import WorkerLaunch

DECLARING = (RunConfig, WorkerConfig, RunCommandOptions)


def run_parser() -> argparse.ArgumentParser:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices["run"]


def test_every_run_flag_is_generated_from_one_declaration() -> None:
    parser = run_parser()
    by_dest = {a.dest: a for a in parser._actions if a.option_strings}
    generated = {name for _, name in RUN_OPTIONS}
    assert set(by_dest) - generated == {"help", "quiet", "verbose"}
    for cls, name in RUN_OPTIONS:
        d = declared(cls, name)
        action = by_dest[name]
        assert action.option_strings == [d.flag], name
        assert action.help == d.help, name
        # One default: the field's (the command line's own only where declared so).
        field_default = getattr(cls(), name)
        if name == "data_dir":
            assert (field_default, action.default) == (None, cli_default(cls, name))
        else:
            expected = list(field_default) if isinstance(field_default, tuple) else field_default
            assert action.default == expected, name


def test_every_declared_flag_is_on_the_command_line_or_only_for_workers() -> None:
    on_cli = {(cls, name) for cls, name in RUN_OPTIONS}
    for cls in DECLARING:
        for name in flagged(cls):
            if (cls, name) not in on_cli:
                # Worker tuning that `rstreams run` does not show: RunConfig.worker_args.
                assert cls is WorkerConfig, (cls, name)


def test_the_command_line_and_the_workers_share_the_worker_defaults(tmp_path) -> None:
    args = run_parser().parse_args(["p.py", "--input", "in.txt", "--data-dir", str(tmp_path)])
    config = cli_run.run_config(args)
    assert config.worker == WorkerConfig() == config.worker_config()
    launch = WorkerLaunch(config=config, job_dir=str(tmp_path / "job"))
    loaded = WorkerLaunch.from_text(launch.to_text())
    assert loaded.config.worker_config() == WorkerConfig()
    # The worker module declares no option of its own: it takes the launch's.
    assert worker.WorkerConfig is WorkerConfig
    assert 'add_argument("--' not in inspect.getsource(worker)


@pytest.mark.parametrize("name", flagged(WorkerConfig))
def test_each_worker_flag_given_its_default_changes_nothing(name: str) -> None:
    flag, default = declared(WorkerConfig, name).flag, getattr(WorkerConfig(), name)
    assert flag is not None
    config = RunConfig(worker_args=[flag, str(default)])
    assert config.worker_config() == WorkerConfig()


def test_worker_args_are_parsed_and_checked_with_the_declarations() -> None:
    config = RunConfig(
        worker_args=["--commit-interval", "0.2", "--allocation", "consistent_hash"],
        worker=WorkerConfig(session_timeout=2.0),
    )
    got = config.worker_config()
    assert (got.commit_interval, got.allocation, got.session_timeout) == (
        0.2,
        "consistent_hash",
        2.0,
    )
    with pytest.raises(
        ConfigError, match=r"worker_args: unknown option\(s\) \['--nope', '1'\]; the"
    ):
        RunConfig(worker_args=["--nope", "1"])
    with pytest.raises(ConfigError, match="worker_args: --rebalance-interval must be >= 1 s"):
        RunConfig(worker_args=["--rebalance-interval", "0.5"])
    with pytest.raises(ConfigError, match="invalid choice: 'random'"):
        RunConfig(worker_args=["--allocation", "random"])
    assert parse_flags(WorkerConfig, []) == {}
    assert get_allocations() == ALLOCATIONS


def get_allocations() -> tuple[str, ...]:
    from rstreams.runtime.rebalance.allocate import _BY_NAME

    return tuple(_BY_NAME)


def test_the_run_command_refuses_what_a_declaration_refuses(capsys) -> None:
    from rstreams.cli import main

    code = main(["run", "p.py", "--input", "x", "--rebalance-interval", "0.5"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "rstreams: error: --rebalance-interval must be >= 1 s; got 0.5\n"


def test_a_config_round_trips_through_json(tmp_path) -> None:
    config = RunConfig(
        workers=3,
        data_dir=tmp_path,
        pipeline="wc.py",
        on_error="dead-letter",
        guarantee="at-least-once",
        state="memory",
        idle_timeout=2.5,
        worker_args=["--commit-interval", "0.3"],
        worker=WorkerConfig(rebalance_interval=5, agent_thread=True, allocation="consistent_hash"),
    )
    assert from_json(RunConfig, to_json(config)) == config
    launch = WorkerLaunch(
        config=config, job_dir="jobs/wc", member="w0-1", parent_pid=42, log_level="INFO"
    )
    assert WorkerLaunch.from_text(launch.to_text()) == launch
    assert attrs.asdict(from_json(WorkerConfig, "{}")) == attrs.asdict(WorkerConfig())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "WorkerLaunch must be a JSON object; got list"),
        ('{"job_dir": "j"}', r"WorkerLaunch is missing \['config'\]"),
        ('{"config": {}, "job_dir": "j", "extra": 1}', r"unknown WorkerLaunch option\(s\)"),
        ('{"config": {}, "job_dir": "j"}', "config.pipeline is missing"),
        ('{"config": {"pipeline": "p", "workers": "2"}, "job_dir": "j"}', "workers must be"),
        ('{"config": {"pipeline": "p", "workers": true}, "job_dir": "j"}', "workers must be"),
        ('{"config": {"pipeline": "p", "workers": 0}, "job_dir": "j"}', "--workers must be >= 1"),
        ('{"config": {"pipeline": "p", "state": "x"}, "job_dir": "j"}', "state must be one of"),
        (
            '{"config": {"pipeline": "p", "worker": {"commit_interval": 0}}, "job_dir": "j"}',
            "commit_interval must be > 0; got 0",
        ),
        (
            '{"config": {"pipeline": "p", "worker_args": ["--x"]}, "job_dir": "j"}',
            r"worker_args: unknown option\(s\)",
        ),
    ],
)
def test_a_bad_launch_is_refused_naming_what(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WorkerLaunch.from_text(text)


def test_the_run_command_takes_the_maintenance_interval(capsys) -> None:
    """``--maintenance-interval`` is declared on WorkerConfig: `rstreams run` takes it
    and hands it to the workers; what its declaration refuses, the command refuses."""
    from rstreams.cli import build_parser, main
    from rstreams.cli_run import run_config

    args = build_parser().parse_args(["run", "p.py", "--input", "x", "--maintenance-interval", "5"])
    assert run_config(args).worker_config().maintenance_interval == 5.0
    default = build_parser().parse_args(["run", "p.py", "--input", "x"])
    assert run_config(default).worker_config().maintenance_interval == 30.0
    assert main(["run", "p.py", "--input", "x", "--maintenance-interval", "0"]) == 2
    assert capsys.readouterr().err == (
        "rstreams: error: --maintenance-interval must be > 0; got 0.0\n"
    )
