"""Fixtures: real PostgreSQL and Redis (embedded unless DATABASE_URL/REDIS_URL
are set), a clean schema per test, and real worker subprocesses."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from resumable.client import Client
from resumable.embedded import ServiceURLs, service_urls
from resumable.models import migrate
from resumable.models.database import Database
from resumable.queue.broker import build_broker
from resumable.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
TEST_HOME = Path(os.environ.get("RESUMABLE_TEST_HOME", ROOT / ".resumable" / "test"))

# Short leases and heartbeats so crash recovery happens in seconds.
WORKER_ENV = {
    "RESUMABLE_LEASE_SECONDS": "2",
    "RESUMABLE_HEARTBEAT_TIMEOUT_MS": "3000",
    "RESUMABLE_MAINTENANCE_CHANCE": "200000",
    "RESUMABLE_WORKER_THREADS": "4",
}


def wait_until(
    predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll `predicate` until it returns something truthy or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def urls() -> Iterator[ServiceURLs]:
    with service_urls(os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL"), TEST_HOME) as u:
        migrate.upgrade(u.database_url)
        yield u


@pytest.fixture
def settings(urls: ServiceURLs) -> Settings:
    return Settings(
        database_url=urls.database_url,
        redis_url=urls.redis_url,
        home=TEST_HOME,
        lease_seconds=2,
        heartbeat_timeout_ms=3000,
        reconcile_grace_seconds=5,
    )


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database(settings.database_url or "", pool_size=4)
    with database.connection() as conn:
        conn.execute(
            "TRUNCATE sessions, checkpoints, audit_events, tool_execution_cache, callbacks, "
            "deliveries, agents, dead_letters, alerts, archived_sessions CASCADE"
        )
    yield database
    database.close()


@pytest.fixture
def redis_client(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.redis_url or "")
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def client(settings: Settings, db: Database, redis_client: redis.Redis) -> Iterator[Client]:
    broker = build_broker(settings, settings.redis_url or "")
    yield Client(settings, db, broker)
    broker.close()


WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"resumable-test-secret-0123456789").decode()
API_TOKEN = "test-token-" + "x" * 20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ManagedProcess:
    """A real `resumable ...` subprocess (worker, web, scheduler), logging to a file."""

    def __init__(
        self,
        command: list[str],
        settings: Settings,
        log_path: Path,
        env: dict[str, str],
        ready_text: str,
    ) -> None:
        self.log_path = log_path
        full_env = {
            **os.environ,
            **WORKER_ENV,
            **env,
            "DATABASE_URL": settings.database_url or "",
            "REDIS_URL": settings.redis_url or "",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        }
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "resumable.cli", *command],
            cwd=ROOT,
            env=full_env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.ready_text = ready_text
        wait_until(self._ready, timeout=30, what=f"{command[0]} to start (log {log_path})")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"process exited early:\n{self.log_path.read_text()}")
        return self.ready_text in self.log_path.read_text()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        return self.proc.returncode


WorkerProcess = ManagedProcess


@pytest.fixture
def web_port() -> int:
    return free_port()


@pytest.fixture
def process_env(web_port: int) -> dict[str, str]:
    """Environment shared by every process of one test's deployment."""
    return {
        "RESUMABLE_PUBLIC_URL": f"http://127.0.0.1:{web_port}",
        "RESUMABLE_API_TOKENS": API_TOKEN,
        "RESUMABLE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "RESUMABLE_SCHEDULER_INTERVAL_SECONDS": "0.25",
        "RESUMABLE_RECONCILE_GRACE_SECONDS": "2",
    }


@pytest.fixture
def start_process(
    settings: Settings,
    tmp_path: Path,
    db: Database,
    redis_client: redis.Redis,
    process_env: dict[str, str],
) -> Iterator[Callable[..., ManagedProcess]]:
    started: list[ManagedProcess] = []

    def start(command: list[str], ready_text: str, **env: str) -> ManagedProcess:
        log = tmp_path / f"{command[0]}-{len(started)}.log"
        process = ManagedProcess(command, settings, log, {**process_env, **env}, ready_text)
        started.append(process)
        return process

    yield start
    for process in reversed(started):
        process.stop()


@pytest.fixture
def start_worker(start_process: Callable[..., ManagedProcess]) -> Callable[..., ManagedProcess]:
    def start(**env: str) -> ManagedProcess:
        return start_process(["worker", "--agents", "tests.agents"], "worker started", **env)

    return start


@pytest.fixture
def start_web(
    start_process: Callable[..., ManagedProcess], web_port: int
) -> Callable[..., ManagedProcess]:
    def start(**env: str) -> ManagedProcess:
        return start_process(["web", "--port", str(web_port)], "Uvicorn running", **env)

    return start


@pytest.fixture
def start_scheduler(start_process: Callable[..., ManagedProcess]) -> Callable[..., ManagedProcess]:
    def start(**env: str) -> ManagedProcess:
        return start_process(["scheduler"], "scheduler started", **env)

    return start


@pytest.fixture
def reconciler(settings: Settings, db: Database, client: Client) -> Iterator[None]:
    """Runs the reconcile function every 200 ms, as the scheduler process will."""
    import threading

    from resumable.scheduler.reconcile import reconcile

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.2):
            reconcile(settings, db, client.broker, grace_seconds=settings.reconcile_grace_seconds)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=5)
