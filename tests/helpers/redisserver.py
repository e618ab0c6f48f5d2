"""Real ``redis-server`` processes for tests: on 127.0.0.1, a free port, a temp directory.

Started from the ``redis-server`` that ``./dev test`` installs (Debian's, 7.0), stopped by
pid. Never a fake: the Redis broker's integration tests run against these.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server process. ``start()``, ``url``, ``stop()``, ``restart()``.

    ``appendonly``: "yes" with ``appendfsync always`` by default (the settings under which
    an acknowledged write survives a restart); ``persist=False`` keeps nothing on disk, for
    the "came back empty" fault. ``extra``: more ``--name value`` settings.
    """

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        persist: bool = True,
        password: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.persist = persist
        self.password = password
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed; ./dev test installs it")
        argv = [
            exe,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        if self.persist:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        return argv + list(self.extra)

    def start(self, timeout: float = 30.0) -> RedisServer:
        self.proc = subprocess.Popen(
            self.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                log = self.directory / "redis.log"
                text = log.read_text() if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {text}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as s,
            ):
                s.sendall(b"PING\r\n")
                reply = s.recv(64)
                if reply.startswith((b"+PONG", b"-NOAUTH")):
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop by pid (SIGTERM: a clean shutdown; SIGKILL: a crash)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    def restart(self, sig: int = signal.SIGTERM) -> RedisServer:
        """Stop and start again on the same port and directory."""
        self.stop(sig)
        return self.start()


@contextlib.contextmanager
def running(directory: Path, **kwargs: object) -> Iterator[RedisServer]:
    server = RedisServer(directory, **kwargs)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()
