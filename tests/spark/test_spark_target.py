"""The Redis server of a Spark run (``spark_target``): no SparkSession needed."""

from __future__ import annotations

import pytest

from rstreams.errors import ConfigError
from rstreams.runtime.spark.redisstreams import spark_target


def test_a_password_in_the_url_is_refused_pointing_to_the_cli_option_and_the_api() -> None:
    with pytest.raises(ConfigError) as e:
        spark_target("redis://app:s3cret@127.0.0.1:6379/0")
    message = str(e.value)
    assert "s3cret" not in message
    assert "--broker-password-file PATH" in message  # `rstreams run --backend spark`
    assert "RedisTarget.parse(url, password_file=...)" in message  # the Python API
