"""The scheduler through a database outage: one line when PostgreSQL stops
answering, quiet backoff, one line when it answers again, and work resumes.

The scheduler is a real process; PostgreSQL is the test server, reached
through a small TCP relay the test opens and closes (a closed port first).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from urllib.parse import urlsplit

import redis
from sqlalchemy.engine import make_url

from resumable.client import Client
from resumable.settings import Settings
from tests.conftest import LocalDeployment, ManagedProcess, free_port, wait_until


class Relay:
    """Forwards a local TCP port to a server (a unix socket path or a host and
    port) while open; while closed the port refuses connections."""

    def __init__(self, target: str | tuple[str, int], port: int) -> None:
        self._unix = isinstance(target, str)
        self._address = target
        self.port = port
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    def open(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        listener.settimeout(0.2)
        self._listener = listener
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        thread.start()
        self._threads.append(thread)

    def close(self) -> None:
        """Stop listening and cut every relayed connection."""
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=5)
        for sock in self._sockets:
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX if self._unix else socket.AF_INET)
            upstream.connect(self._address)
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._pipe, args=(source, sink), daemon=True)
                thread.start()
                self._threads.append(thread)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _database_target(settings: Settings) -> str | tuple[str, int]:
    url = make_url(settings.database_url or "")
    socket_dir = url.query.get("host")
    if isinstance(socket_dir, tuple):
        socket_dir = socket_dir[0]
    if url.host is None and socket_dir:
        return f"{socket_dir}/.s.PGSQL.{url.port or 5432}"
    return (url.host or "127.0.0.1", url.port or 5432)


def _redis_target(settings: Settings) -> str | tuple[str, int]:
    url = settings.redis_url or ""
    if url.startswith("unix://"):
        return url.removeprefix("unix://").split("?", 1)[0]
    parts = urlsplit(url)
    return (parts.hostname or "127.0.0.1", parts.port or 6379)


def _relayed_database_url(settings: Settings, port: int) -> str:
    url = make_url(settings.database_url or "")
    return url.set(host="127.0.0.1", port=port, query={}).render_as_string(hide_password=False)


def _log_lines(process: ManagedProcess) -> list[str]:
    return [line for line in process.output().splitlines() if line.strip()]


def test_scheduler_reports_an_outage_once_backs_off_and_resumes(
    settings: Settings,
    client: Client,
    redis_client: redis.Redis,
    deployment: LocalDeployment,
) -> None:
    relay = Relay(_database_target(settings), free_port())
    relayed = settings.model_copy(
        update={"database_url": _relayed_database_url(settings, relay.port)}
    )
    scheduler = deployment.start(
        ["scheduler"],
        "scheduler started",
        DATABASE_URL=relayed.database_url or "",
        REDIS_URL=relayed.redis_url or "",
    )
    try:
        wait_until(
            lambda: "database unreachable at 127.0.0.1" in scheduler.output(),
            timeout=15,
            what="the outage line",
        )
        # A few seconds of outage at a 0.25 s interval: without backoff every
        # job would fail (and log a traceback) four times a second.
        time.sleep(4)
        lines = _log_lines(scheduler)
        assert len(lines) == 2, "\n".join(lines)
        assert "Connection refused; retrying" in lines[1]

        session_id = client.start("five")
        redis_client.flushdb()  # its message is lost: only the reconciler can bring it back
        relay.open()
        wait_until(
            lambda: "database reachable again" in scheduler.output(),
            timeout=20,
            what="the recovery line",
        )
        wait_until(
            lambda: redis_client.keys("resumable:*"),
            timeout=20,
            what="the reconciler to re-enqueue the session",
        )
        assert client.get(session_id).status == "pending"
        lines = _log_lines(scheduler)
        assert "reachable again at 127.0.0.1" in lines[2], "\n".join(lines)
        assert not [line for line in lines if "Traceback" in line or "ERROR" in line], lines
    finally:
        scheduler.stop()
        relay.close()


def test_scheduler_reports_a_redis_outage_once_and_resumes(
    settings: Settings,
    client: Client,
    redis_client: redis.Redis,
    deployment: LocalDeployment,
) -> None:
    relay = Relay(_redis_target(settings), free_port())
    relayed = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{relay.port}/0"})
    # A pending session whose message is lost: the reconciler must send one, on Redis.
    session_id = client.start("five")
    redis_client.flushdb()
    scheduler = deployment.start(
        ["scheduler"],
        "scheduler started",
        DATABASE_URL=relayed.database_url or "",
        REDIS_URL=relayed.redis_url or "",
    )
    try:
        wait_until(
            lambda: "redis unreachable at 127.0.0.1" in scheduler.output(),
            timeout=15,
            what="the outage line",
        )
        time.sleep(3)  # the measurement window: nothing more is said while it is down
        lines = _log_lines(scheduler)
        assert len(lines) == 2, "\n".join(lines)
        assert "Connection refused" in lines[1] and "retrying" in lines[1]

        relay.open()
        wait_until(
            lambda: "redis reachable again" in scheduler.output(),
            timeout=20,
            what="the recovery line",
        )
        wait_until(
            lambda: redis_client.keys("resumable:*"),
            timeout=20,
            what="the reconciler to re-enqueue the session",
        )
        assert client.get(session_id).status == "pending"
        lines = _log_lines(scheduler)
        assert not [line for line in lines if "Traceback" in line or "ERROR" in line], lines
    finally:
        scheduler.stop()
        relay.close()
