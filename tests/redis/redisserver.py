"""Moved to tests/helpers/redisserver.py (import it as ``tests.helpers.redisserver``);
this name stays for the modules of tests/redis/ that import ``redisserver``."""

from tests.helpers.redisserver import RedisServer, free_port, running

__all__ = ["RedisServer", "free_port", "running"]
