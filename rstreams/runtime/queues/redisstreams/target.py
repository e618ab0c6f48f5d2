"""Where a Redis broker lives: :class:`RedisTarget` (a parsed ``redis://`` URL) and
:func:`connect`.

A target never shows its password: ``str()``, ``repr()``, :attr:`RedisTarget.redacted`
and every error :func:`connect` raises print ``***`` in its place.

>>> t = RedisTarget.parse("redis://app:s3cret@db.example:6380/2")
>>> str(t), t.host, t.port, t.db, t.username
('redis://app:***@db.example:6380/2', 'db.example', 6380, 2, 'app')
>>> "s3cret" in repr(t)
False
>>> RedisTarget.parse("rediss://cache").redacted
'rediss://cache:6379/0'
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import attrs

from rstreams.errors import ConfigError

if TYPE_CHECKING:
    import redis

__all__ = [
    "MIN_REDIS_VERSION",
    "RedisAuthError",
    "RedisConfigError",
    "RedisDatabaseError",
    "RedisTLSError",
    "RedisTarget",
    "RedisUnreachableError",
    "RedisVersionError",
    "check_version",
    "connect",
]

#: Streams with ``XADD key 0-*`` (explicit time, server sequence) need Redis 7.0.
MIN_REDIS_VERSION = (7, 0)
DEFAULT_PORT = 6379


class RedisConfigError(ConfigError):
    """A Redis broker cannot be used as given (``rstreams`` exits 2). Never names a password."""


class RedisUnreachableError(RedisConfigError):
    """Nothing answers at the target's host and port."""


class RedisAuthError(RedisConfigError):
    """The server refused the user name or password (or wants one that was not given)."""


class RedisDatabaseError(RedisConfigError):
    """The server has no database of the target's number."""


class RedisVersionError(RedisConfigError):
    """The server is older than :data:`MIN_REDIS_VERSION`."""


class RedisTLSError(RedisConfigError):
    """The TLS handshake failed (certificate, CA, or a server that does not speak TLS)."""


def _read_password_file(path: str) -> str:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise RedisConfigError(
            f"cannot read the Redis password file {path}: {e.strerror or e}"
        ) from None
    line = text.splitlines()[0] if text else ""
    if not line:
        raise RedisConfigError(f"the Redis password file {path} is empty")
    return line


@attrs.frozen(repr=False)
class RedisTarget:
    """A Redis server and database: host, port, db, user, password, TLS files.

    Build one with :meth:`parse`. The password is kept in memory only; :meth:`to_json`
    carries the password file's path when there is one (and the password itself only
    when it came in the URL: workers get that on stdin, never in argv).
    """

    host: str
    port: int = DEFAULT_PORT
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    password_file: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @classmethod
    def parse(
        cls,
        url: str,
        password_file: str | None = None,
        *,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> RedisTarget:
        """``redis://[user[:pass]@]host[:port][/db]`` or ``rediss://...`` (TLS).

        ``password_file``: a file whose first line is the password (it overrides one in
        the URL). A malformed URL is a :class:`RedisConfigError` that does not repeat it
        (it may hold a password).
        """
        try:
            parts = urlsplit(url)
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise RedisConfigError(
                "a Redis URL must look like redis://[user[:password]@]host[:port][/db]"
            ) from None
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise RedisConfigError(
                f"a Redis URL must look like redis://[user[:password]@]host[:port][/db] or "
                f"rediss://... (TLS); got scheme {parts.scheme!r} and host {parts.hostname!r}"
            )
        if parts.query or parts.fragment:
            raise RedisConfigError(
                "a Redis URL takes no ?options or #fragment: give TLS files and the password "
                "file as options of their own"
            )
        path = parts.path.strip("/")
        if path and not path.isdigit():
            raise RedisConfigError(f"the database of a Redis URL is a number; got {path!r}")
        password = unquote(parts.password) if parts.password else None
        if password_file is not None:
            password = _read_password_file(password_file)
        tls = parts.scheme == "rediss"
        if not tls and (tls_ca or tls_cert or tls_key):
            raise RedisConfigError("TLS certificates need a rediss:// URL")
        return cls(
            host=parts.hostname,
            port=port,
            db=int(path or 0),
            username=unquote(parts.username) if parts.username else None,
            password=password,
            tls=tls,
            password_file=password_file,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )

    @property
    def redacted(self) -> str:
        """The URL with ``***`` for the password: what logs and errors show."""
        scheme = "rediss" if self.tls else "redis"
        user = self.username or ""
        auth = f"{user}:***@" if self.password else (f"{user}@" if user else "")
        return f"{scheme}://{auth}{self.address}/{self.db}"

    @property
    def address(self) -> str:
        """``host:port`` (``[host]:port`` for an IPv6 address)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return self.redacted

    def __repr__(self) -> str:
        return f"RedisTarget({self.redacted!r})"

    def scrub(self, text: str) -> str:
        """``text`` with the password (if any) replaced by ``***``."""
        return text.replace(self.password, "***") if self.password else text

    def to_json(self) -> str:
        """The target for a worker process. Holds the password file's path when there is
        one; the password itself only when it came in the URL (send this on stdin)."""
        doc: dict[str, Any] = attrs.asdict(self)
        if self.password_file is not None:
            doc["password"] = None
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RedisTarget:
        """The target :meth:`to_json` wrote (the password file is read again)."""
        doc = json.loads(text)
        if doc.get("password_file") is not None:
            doc["password"] = _read_password_file(doc["password_file"])
        return cls(**doc)


def check_version(version: str, where: str) -> None:
    """Refuse a server older than :data:`MIN_REDIS_VERSION` (``version`` as INFO gives it).

    >>> check_version("7.0.15", "Redis at h:1")
    >>> check_version("6.2.14", "Redis at h:1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rstreams.runtime.queues.redisstreams.target.RedisVersionError: Redis at h:1 runs ...
    """
    parts = tuple(int(p) if p.isdigit() else 0 for p in version.split(".")[:2])
    if parts < MIN_REDIS_VERSION:
        raise RedisVersionError(
            f"{where} runs Redis {version}; rstreams needs "
            f"{'.'.join(map(str, MIN_REDIS_VERSION))} or newer"
        )


#: What to run when the Redis client is missing.
INSTALL_HINT = "pip install 'rstreams[redis]'"


def require_client() -> None:
    """Refuse, in one line (exit 2), a Redis broker without the Redis client installed
    (the optional ``redis`` extra), before anything imports it."""
    try:
        import redis  # noqa: F401
    except ImportError as e:
        raise RedisConfigError(
            f"--broker redis://... needs the Redis client: {INSTALL_HINT} ({e.name} missing)"
        ) from None


def connect(target: RedisTarget, *, patience: float = 0.0, **options: Any) -> redis.Redis:
    """A client of ``target``, checked: reachable, authenticated, the database exists and
    the server is Redis >= 7.0. Each failure is one clear line (a
    :class:`RedisConfigError`: the CLI exits 2) that never holds the password.

    ``patience``: for how many seconds to try again (with a backoff) while the server
    does not answer or is still loading its data (a restart); a refused password, a
    missing database or an old server are never tried again: they fail at once.

    The client does not retry a command by itself (``options`` may say otherwise): a
    write whose reply was lost may or may not have been applied, and only the caller can
    tell (by what it committed) whether to send it again without duplicating it.
    """
    require_client()
    deadline = time.monotonic() + patience
    delay = 0.05
    while True:
        try:
            return _connect_once(target, **options)
        except RedisUnreachableError:
            if time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def _connect_once(target: RedisTarget, **options: Any) -> redis.Redis:
    import redis
    import redis.exceptions as rx

    where = f"Redis at {target.address}"
    client = redis.Redis(**{**_client_options(target), **options})
    try:
        info = client.info("server")
    except (
        rx.AuthenticationError, rx.AuthorizationError, rx.NoPermissionError, rx.ResponseError,
        rx.ConnectionError, rx.TimeoutError, OSError,
    ) as e:  # fmt: skip
        client.close()
        raise _refusal(target, where, e) from None
    try:
        check_version(str(info.get("redis_version", "0")), where)
    except RedisVersionError:
        client.close()
        raise
    return client


def _client_options(target: RedisTarget) -> dict[str, Any]:
    """redis-py's settings for ``target``: its address and credentials, TLS, and no
    retries of its own (the callers retry, knowing what a retry may repeat)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    kwargs: dict[str, Any] = {
        "host": target.host,
        "port": target.port,
        "db": target.db,
        "username": target.username,
        "password": target.password,
        "socket_connect_timeout": 5,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": Retry(NoBackoff(), 0),
    }
    if target.tls:
        kwargs.update(
            ssl=True,
            ssl_ca_certs=target.tls_ca,
            ssl_certfile=target.tls_cert,
            ssl_keyfile=target.tls_key,
        )
    return kwargs


def _refusal(target: RedisTarget, where: str, e: Exception) -> RedisConfigError:
    """The error a user sees for the first command's failure ``e``: refused credentials,
    no such database, another error reply, failed TLS, or no server there (secrets
    scrubbed from the text)."""
    import redis.exceptions as rx

    text = target.scrub(str(e))
    if isinstance(e, (rx.AuthenticationError, rx.AuthorizationError, rx.NoPermissionError)):
        return RedisAuthError(f"{where} refused the credentials of {target.redacted}: {text}")
    if isinstance(e, rx.ResponseError):
        if "DB index" in text or "invalid DB" in text:
            return RedisDatabaseError(
                f"{where} has no database {target.db} ({text}); raise its `databases` setting "
                "or use another number"
            )
        if "NOAUTH" in text or "WRONGPASS" in text or "AUTH" in text:
            return RedisAuthError(f"{where} refused the credentials of {target.redacted}: {text}")
        return RedisConfigError(f"{where} answered with an error: {text}")
    if target.tls and any(w in text for w in ("SSL", "TLS", "certificate", "Timeout")):
        # (a server that does not speak TLS never answers the handshake: a timeout)
        return RedisTLSError(
            f"TLS with {where} failed: {text} (check the CA and client certificate files, "
            "and that the server listens for TLS on this port)"
        )
    return RedisUnreachableError(
        f"cannot reach {where}: {text.rstrip('.')}; is a redis-server (7.0 or newer) running "
        f"there, and is the URL right ({target.redacted})?"
    )
