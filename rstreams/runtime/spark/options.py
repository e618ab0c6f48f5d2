"""The options of a run on Spark: :func:`spark_config` merges ``run_spark``'s keywords
with a :class:`~rstreams.config.RunConfig` (refusing a keyword that disagrees with a
config given), :func:`redis_target` names the server of its Redis streams."""

from __future__ import annotations

from typing import Any

import attrs

from rstreams.config import RunConfig
from rstreams.errors import ConfigError
from rstreams.runtime.queues.redisstreams.target import RedisTarget
from rstreams.runtime.spark.redisstreams import spark_target

#: run_spark's keywords that are options of the run itself; the others are its Spark
#: section's (SparkConfig).
_RUN_KEYWORDS = ("master", "on_error")


def spark_config(config: RunConfig | None, **given: Any) -> RunConfig:
    """``config`` (default: every option's default) with the options given as keywords
    (None: not given). With a ``config``, a keyword that disagrees with it is refused:
    silently taking one of the two would run with an option the caller did not mean.

    >>> spark_config(None, on_error="skip", streaming=True).on_spark.streaming
    True
    >>> spark_config(RunConfig(on_error="skip"), on_error="fail")
    Traceback (most recent call last):
    ...
    rstreams.errors.ConfigError: run_spark: on_error='fail' disagree(s) with the config ...
    """
    base = config or RunConfig()
    run = {k: v for k, v in given.items() if v is not None and k in _RUN_KEYWORDS}
    spark = {k: v for k, v in given.items() if v is not None and k not in _RUN_KEYWORDS}
    wanted = base.replace(**run, on_spark=attrs.evolve(base.on_spark, **spark))
    if config is not None:

        def values(c: RunConfig) -> dict[str, Any]:
            return {**{k: getattr(c, k) for k in run}, **{k: getattr(c.on_spark, k) for k in spark}}

        had, want = values(config), values(wanted)
        clash = [k for k in had if had[k] != want[k]]
        if clash:
            raise ConfigError(
                f"run_spark: {', '.join(f'{k}={given[k]!r}' for k in clash)} disagree(s) "
                f"with the config given ({', '.join(f'{k}={had[k]!r}' for k in clash)}); "
                "give each option once, in the config or as a keyword"
            )
    return wanted


def redis_target(config: RunConfig, redis: str | RedisTarget | None) -> RedisTarget | None:
    """The server of the RedisStream sources and sinks: ``redis``, or the config's
    broker (with its password file and TLS files); refused when both are given."""
    if redis is not None and config.broker is not None and redis != config.broker:
        raise ConfigError(
            "run_spark: redis= and the config's broker both name the Redis server; give one"
        )
    if redis is not None:
        return spark_target(redis)
    if config.broker is None:
        return None
    # (as the durable runtime's broker_target: Spark does not import the engine)
    return spark_target(
        RedisTarget.parse(
            config.broker,
            config.broker_password_file,
            tls_ca=config.broker_tls_ca,
            tls_cert=config.broker_tls_cert,
            tls_key=config.broker_tls_key,
        )
    )
