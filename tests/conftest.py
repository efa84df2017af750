"""Fixtures: real PostgreSQL and Redis (embedded unless DATABASE_URL/REDIS_URL
are set), a clean schema per test, and real worker subprocesses."""

from __future__ import annotations

import os
import signal
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
        conn.execute("TRUNCATE sessions, checkpoints, audit_events, tool_execution_cache CASCADE")
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


class WorkerProcess:
    """A real `resumable worker` subprocess."""

    def __init__(self, settings: Settings, log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        full_env = {
            **os.environ,
            **WORKER_ENV,
            **env,
            "DATABASE_URL": settings.database_url or "",
            "REDIS_URL": settings.redis_url or "",
            "PYTHONPATH": str(ROOT),
        }
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "resumable.cli", "worker", "--agents", "tests.agents"],
            cwd=ROOT,
            env=full_env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, timeout=30, what=f"worker to start (log {log_path})")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"worker exited early:\n{self.log_path.read_text()}")
        return "worker started" in self.log_path.read_text()

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


@pytest.fixture
def start_worker(
    settings: Settings, tmp_path: Path, db: Database, redis_client: redis.Redis
) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(**env: str) -> WorkerProcess:
        worker = WorkerProcess(settings, tmp_path / f"worker-{len(started)}.log", env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def reconciler(settings: Settings, db: Database, client: Client) -> Iterator[None]:
    """Runs the reconcile function every 200 ms, as the scheduler process will."""
    import threading

    from resumable.reconcile import reconcile

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.2):
            reconcile(settings, db, client.broker, grace_seconds=settings.reconcile_grace_seconds)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=5)
