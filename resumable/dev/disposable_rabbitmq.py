"""A RabbitMQ node of one's own, to kill and start again.

The fault matrix and the RabbitMQ tests must restart the broker the way a
server restarts (``kill -9`` of its VM, then the same address again), which
cannot be done to the machine's shared RabbitMQ. This one is a separate node
of the installed ``rabbitmq-server`` (Debian's package) with its own name,
ports and data directory, so what it persisted (durable queues, persistent
messages) is there again after a restart, as on a real server.

``rabbitmq-server`` drops to the ``rabbitmq`` user when started as root, so
the directory is handed to that user (its parents must let that user in:
not a directory under root's private ``/tmp/pytest-of-root``). The node name carries the port:
nodes of several runs on one machine never meet.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

from resumable.dev.processes import free_port

SERVER = "/usr/sbin/rabbitmq-server"


def rabbitmq_installed() -> bool:
    return Path(SERVER).exists()


class DisposableRabbitMQ:
    """A RabbitMQ node under `directory` on `bind`:`port` (127.0.0.1 and a
    free port by default)."""

    def __init__(self, directory: Path, port: int | None = None, bind: str = "127.0.0.1") -> None:
        self.directory = directory
        self.port = port or free_port()
        self.dist_port = free_port()
        self.bind = bind
        self.node = f"resumable{self.port}@localhost"
        self.url = f"amqp://guest:guest@{bind}:{self.port}/%2F"
        self.pid: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": self.bind,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_PID_FILE": str(self.directory / "node.pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            "RABBITMQ_FEATURE_FLAGS_FILE": str(self.directory / "feature_flags"),
            "RABBITMQ_CONFIG_FILE": str(self.directory / "rabbitmq.conf"),
        }

    def start(self, timeout: float = 60.0) -> Self:
        for sub in ("mnesia", "log"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        (self.directory / "enabled_plugins").write_text("[].\n")
        # RabbitMQ lets `guest` in from loopback only: bound elsewhere, it
        # must let in other hosts' clients.
        loopback = "" if self.bind == "127.0.0.1" else "loopback_users = none\n"
        (self.directory / "rabbitmq.conf").write_text(loopback)
        pidfile = self.directory / "node.pid"
        pidfile.unlink(missing_ok=True)
        if os.geteuid() == 0:  # the server runs as `rabbitmq`: its files must be its own
            owner = pwd.getpwnam("rabbitmq")
            for path in [self.directory, *self.directory.rglob("*")]:
                os.chown(path, owner.pw_uid, owner.pw_gid)
        with (self.directory / "server.out").open("ab") as out:
            self._process = subprocess.Popen(
                self.command(),
                env=self._env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self._process.poll() is not None or time.monotonic() > deadline:
                log = (self.directory / "server.out").read_text(errors="replace")[-2000:]
                self.kill()
                raise RuntimeError(f"RabbitMQ node {self.node} did not start:\n{log}")
            time.sleep(0.1)
        self.pid = int(pidfile.read_text().strip()) if pidfile.exists() else None
        return self

    def command(self) -> list[str]:
        """The server's command line (a harness that runs it on another
        network namespace wraps it)."""
        return [SERVER]

    def answers(self) -> bool:
        """Whether an AMQP connection opens (the node has started its listener
        late in boot, and it refuses connections until the broker is up)."""
        import pika
        import pika.exceptions

        try:
            with socket.create_connection((self.bind, self.port), timeout=0.5):
                pass
            params = pika.URLParameters(self.url)
            params.socket_timeout = params.stack_timeout = 2.0
            params.connection_attempts = 1
            pika.BlockingConnection(params).close()
            return True
        except (OSError, pika.exceptions.AMQPError):
            return False

    def kill(self) -> None:
        """SIGKILL the node's Erlang VM: every connection drops; what it had
        written to disk is there when it starts again."""
        pids = [pid for pid in (self.pid, self._vm_pid()) if pid]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(10)
            self._process = None
        deadline = time.monotonic() + 10.0
        while self._listening() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.pid = None

    def _vm_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.directory / "node.pid").read_text().strip())
        return None

    def _listening(self) -> bool:
        try:
            with socket.create_connection((self.bind, self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> DisposableRabbitMQ:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.remove()
