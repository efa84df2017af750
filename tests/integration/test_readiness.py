"""A real `resumable web` while PostgreSQL is unreachable: readiness says so
within a second or two, requests fail fast with 503 and Retry-After, and all
comes back when the database does.

The database is cut with a TCP proxy this test owns (the shared server is
never stopped): closing the proxy drops every connection and refuses new ones.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

import httpx
import psycopg
import pytest

from resumable.models.database import libpq_url
from resumable.settings import Settings
from tests.conftest import API_TOKEN, LocalDeployment, ManagedProcess, free_port, wait_until

AUTH = {"authorization": f"Bearer {API_TOKEN}"}


class CuttableProxy:
    """Forwards 127.0.0.1:<port> to the database; `cut()` is an outage."""

    def __init__(self, target: str | tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def _connect_target(self) -> socket.socket:
        if isinstance(self.target, str):
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.connect(self.target)
        return upstream

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                downstream, _ = listener.accept()
            except OSError:
                return
            upstream = self._connect_target()
            with self._lock:
                self._sockets += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        assert self._listener is not None
        # shutdown() wakes the thread blocked in accept(); close() alone would not.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()


def _target(database_url: str) -> str | tuple[str, int]:
    info = psycopg.conninfo.conninfo_to_dict(libpq_url(database_url))
    host, port = str(info.get("host") or "localhost"), int(info.get("port") or 5432)
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


def _via(database_url: str, port: int) -> str:
    info = psycopg.conninfo.conninfo_to_dict(libpq_url(database_url))
    user, dbname = info.get("user") or "postgres", info.get("dbname") or "postgres"
    password = f":{info['password']}" if info.get("password") else ""
    return f"postgresql://{user}{password}@127.0.0.1:{port}/{dbname}"


@pytest.fixture
def start_web_on(deployment: LocalDeployment, web_port: int) -> Callable[[str], ManagedProcess]:
    """Start `resumable web` with its own DATABASE_URL (the deployment's pins it)."""

    def start(database_url: str) -> ManagedProcess:
        return deployment.start(
            ["web", "--port", str(web_port)],
            "Uvicorn running",
            DATABASE_URL=database_url,
            RESUMABLE_AGENTS="tests.agents",
        )

    return start


def _timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = call()
    return answer, time.monotonic() - started


def test_readiness_and_writes_fail_fast_while_the_database_is_down(
    settings: Settings, start_web_on: Callable[[str], ManagedProcess], web_port: int
) -> None:
    proxy = CuttableProxy(_target(settings.database_url or ""))
    proxy.start()
    start_web_on(_via(settings.database_url or "", proxy.port))
    base = f"http://127.0.0.1:{web_port}"
    with httpx.Client(base_url=base, headers=AUTH, timeout=40) as http:
        assert http.get("/readyz").status_code == 200
        created = http.post("/v1/sessions", json={"agent": "five"})
        assert created.status_code == 201, created.text
        session_id = created.json()["session_id"]

        proxy.cut()
        ready, took = _timed(lambda: http.get("/readyz"))
        assert ready.status_code == 503 and took < 2.0, (ready.text, took)
        assert ready.json()["checks"]["database"].startswith("error")
        assert ready.json()["checks"]["broker"] == "ok"
        for request in (
            lambda: http.post("/v1/sessions", json={"agent": "five"}),
            lambda: http.get(f"/v1/sessions/{session_id}"),
            lambda: http.get("/v1/sessions"),
            lambda: http.get("/metrics"),
        ):
            answer, took = _timed(request)
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"] == "5"
            assert answer.json()["error"]["code"] == "database_unavailable"
            assert took < 4.0, took
        ready, took = _timed(lambda: http.get("/readyz"))
        assert ready.status_code == 503 and took < 2.0, took

        proxy.start()
        wait_until(lambda: http.get("/readyz").status_code == 200, what="readiness again")
        again = http.post("/v1/sessions", json={"agent": "five"})
        assert again.status_code == 201, again.text
        assert http.get(f"/v1/sessions/{session_id}").status_code == 200
    proxy.cut()


def test_a_web_started_without_its_database_answers_503_at_once(
    start_web_on: Callable[[str], ManagedProcess], web_port: int
) -> None:
    closed = free_port()  # nothing listens there
    start_web_on(f"postgresql://postgres@127.0.0.1:{closed}/resumable")
    with httpx.Client(base_url=f"http://127.0.0.1:{web_port}", headers=AUTH, timeout=40) as http:
        assert http.get("/healthz").status_code == 200
        ready, took = _timed(lambda: http.get("/readyz"))
        assert ready.status_code == 503 and took < 2.0, (ready.text, took)
        created, took = _timed(lambda: http.post("/v1/sessions", json={"agent": "five"}))
        assert created.status_code == 503 and took < 4.0, (created.text, took)
        assert created.headers["retry-after"] == "5"
