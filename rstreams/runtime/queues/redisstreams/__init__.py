"""Redis Streams as the queue layer: :class:`RedisBroker` and where it connects.

Importing this package does not import the ``redis`` client (the ``redis`` extra):
:func:`connect` and :meth:`RedisBroker.open` do.
"""

from rstreams.errors import FencedError
from rstreams.runtime.queues.redisstreams.broker import RedisBroker
from rstreams.runtime.queues.redisstreams.lost import RedisDataLostError
from rstreams.runtime.queues.redisstreams.target import (
    RedisAuthError,
    RedisConfigError,
    RedisDatabaseError,
    RedisTarget,
    RedisTLSError,
    RedisUnreachableError,
    RedisVersionError,
    connect,
)
from rstreams.runtime.queues.redisstreams.transaction import Transaction

__all__ = [
    "FencedError",
    "RedisAuthError",
    "RedisBroker",
    "RedisConfigError",
    "RedisDataLostError",
    "RedisDatabaseError",
    "RedisTLSError",
    "RedisTarget",
    "RedisUnreachableError",
    "RedisVersionError",
    "Transaction",
    "connect",
]
