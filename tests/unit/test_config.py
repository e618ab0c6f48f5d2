"""One RunConfig: the options' names, defaults and checks are the same from Python, the
command line, the Supervisor and the engines."""

from __future__ import annotations

import argparse
import inspect
from types import ModuleType
from typing import get_args

import attrs
import pytest

from rstreams import run
from rstreams.cli import build_parser
from rstreams.config import (
    BACKENDS,
    DEFAULT_DATA_DIR,
    GUARANTEES,
    IN_PROCESS_GUARANTEE,
    IN_PROCESS_STATE,
    ON_ERROR,
    STATE_BACKENDS,
    Backend,
    Guarantee,
    OnError,
    RunConfig,
    StateBackend,
    dead_letter_topic,
)
from rstreams.errors import ConfigError
from rstreams.runtime.engine.coordination.supervisor import Supervisor
from rstreams.runtime.engine.operators.context import EngineConfig

FIELDS = attrs.fields_dict(RunConfig)


def spark_runner() -> ModuleType:
    """rstreams.runtime.spark.runner; the rest of the test is skipped without the spark
    extra (the module imports pyspark)."""
    pytest.importorskip("pyspark", reason="the Spark backend needs pip install 'rstreams[spark]'")
    from rstreams.runtime.spark import runner

    return runner


def run_parser() -> argparse.ArgumentParser:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices["run"]


def test_the_command_line_shows_and_passes_runconfigs_defaults_and_choices() -> None:
    parser = run_parser()
    cli = vars(parser.parse_args(["pipeline.py"]))
    shared = ("backend", "on_error", "guarantee", "state", "max_restarts", "allow_topology_change")
    for name in shared:
        assert cli[name] == FIELDS[name].default, name
    assert cli["data_dir"] == DEFAULT_DATA_DIR
    choices = {a.dest: tuple(a.choices) for a in parser._actions if a.choices}
    assert choices["backend"] == BACKENDS
    assert choices["on_error"] == ON_ERROR
    assert choices["guarantee"] == GUARANTEES
    assert choices["state"] == STATE_BACKENDS


def test_the_allowed_values_are_the_literal_types() -> None:
    assert ON_ERROR == get_args(OnError) == ("fail", "skip", "dead-letter")
    assert get_args(Guarantee) == GUARANTEES
    assert get_args(StateBackend) == STATE_BACKENDS
    assert get_args(Backend) == BACKENDS


def test_run_supervisor_and_spark_take_a_runconfig_and_no_defaults_of_their_own() -> None:
    # run() and the Supervisor take the options as a RunConfig or as its keywords: no
    # keyword with a default of its own that could drift from RunConfig's.
    for fn in (run, Supervisor.__init__):
        params = inspect.signature(fn).parameters
        assert "config" in params
        assert not set(params) & (set(FIELDS) - {"config"}), fn
    assert "config" in inspect.signature(spark_runner().run_spark).parameters


def test_engine_defaults_come_from_the_same_place() -> None:
    engine = EngineConfig()
    assert engine.on_error == RunConfig().on_error
    # The in-process engine's own documented choice, named in rstreams.config.
    assert (engine.guarantee, engine.state) == (IN_PROCESS_GUARANTEE, IN_PROCESS_STATE)
    assert (RunConfig().guarantee, RunConfig().state) == ("exactly-once", "rocksdb")


def test_dead_letter_topic_is_defined_once() -> None:
    from rstreams.runtime.engine.operators import context

    assert context.dead_letter_topic is dead_letter_topic
    runner = spark_runner()
    assert runner.dead_letter_topic is dead_letter_topic
    assert not hasattr(runner, "ON_ERROR") or runner.ON_ERROR is ON_ERROR


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"on_error": "ignore"}, "on_error must be one of fail, skip, dead-letter; got 'ignore'"),
        ({"guarantee": "maybe"}, "guarantee must be one of exactly-once, at-least-once"),
        ({"state": "redis"}, "state must be one of rocksdb, memory; got 'redis'"),
        ({"backend": "flink"}, "backend must be one of embedded, spark; got 'flink'"),
        ({"workers": 0}, "--workers must be >= 1; got 0"),
        ({"max_restarts": -1}, "--max-restarts must be >= 0; got -1"),
        ({"max_restart_backoff": 0}, "--max-restart-backoff must be > 0 s; got 0"),
        ({"metrics_port": 70000}, "--metrics-port must be 0..65535"),
        ({"chunk_lines": 0}, "chunk_lines must be >= 1; got 0"),
    ],
)
def test_bad_options_are_refused_naming_option_and_allowed_values(options, message) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunConfig(**options)
    with pytest.raises(ConfigError, match="must be"):
        RunConfig().replace(**options)


def test_overrides_replace_and_unknown_options_are_refused(tmp_path) -> None:
    base = RunConfig(workers=2, data_dir=tmp_path)
    assert base.data_dir == str(tmp_path)  # paths are kept as text
    changed = RunConfig.of(base, on_error="skip")
    assert (changed.workers, changed.on_error, base.on_error) == (2, "skip", "fail")
    assert RunConfig.of(None) == RunConfig()
    with pytest.raises(ConfigError, match=r"unknown run option\(s\) \['wokers'\]"):
        base.replace(wokers=3)


def test_run_refuses_a_bad_option_before_reading_anything(tmp_path) -> None:
    from rstreams import StreamBuilder

    b = StreamBuilder("c")
    b.source("in").keyBy(lambda v: v).count().sink("out")
    path = tmp_path / "in.txt"
    path.write_text("a\n")
    with pytest.raises(ConfigError, match="on_error must be one of"):
        run(b.build(), {"in": str(path)}, on_error="explode")
    with pytest.raises(ConfigError, match="on_error must be one of"):
        run(b.build(), {"in": str(path)}, RunConfig().replace(on_error="skip"), on_error="no")
    result = run(b.build(), {"in": str(path)}, RunConfig(on_error="skip"))
    assert result.tables["out"] == {"a": 1}


def test_broker_options_hide_the_password_and_need_broker():
    from rstreams.runtime.engine.coordination.launch import WorkerLaunch

    c = RunConfig(broker="redis://app:s3cret@db:6379/0", pipeline="wc.py")
    assert "s3cret" not in repr(c) and "redis://app:***@db:6379/0" in repr(c)
    # The worker gets it whole, on its standard input.
    launch = WorkerLaunch(config=c, job_dir="d/wc")
    assert WorkerLaunch.from_text(launch.to_text()).config.broker == c.broker
    with pytest.raises(ConfigError, match=r"--broker must be redis://") as e:
        RunConfig(broker="http://app:s3cret@db")
    assert "s3cret" not in str(e.value)
    for options in ({"join": True}, {"broker_password_file": "pw"}):
        with pytest.raises(ConfigError, match="need --broker URL"):
            RunConfig(**options)
