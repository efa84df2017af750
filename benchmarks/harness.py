"""Helpers shared by the benchmark scripts: servers, processes, waiting, statistics.

The scripts run as ``.venv/bin/python benchmarks/NAME.py`` and import this module
as ``benchmarks.harness`` (they put the repository root on ``sys.path`` first).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
import redis

from resumable.embedded import service_urls
from resumable.models import migrate
from resumable.models.database import libpq_url

ROOT = Path(__file__).resolve().parent.parent


# -- servers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Services:
    """Where the benchmark's PostgreSQL and Redis are, migrated and ready."""

    database_url: str  # as resumable takes it (SQLAlchemy form)
    redis_url: str
    pg_url: str  # the same database in the form libpq/psycopg takes
    where: str  # for the report
    own_database: bool  # an embedded server under the benchmark's home, not DATABASE_URL


@contextlib.contextmanager
def bench_services(home: Path) -> Iterator[Services]:
    """``DATABASE_URL``/``REDIS_URL`` when set, else embedded servers under `home`
    (stopped on exit unless another local process still uses them); migrated."""
    database_env = os.environ.get("DATABASE_URL")
    redis_env = os.environ.get("REDIS_URL")
    with service_urls(database_env, redis_env, home) as urls:
        where = ", ".join(
            [
                "DATABASE_URL" if database_env else f"embedded PostgreSQL in {home / 'postgres'}",
                "REDIS_URL" if redis_env else "embedded Valkey",
            ]
        )
        migrate.upgrade(urls.database_url)
        yield Services(
            database_url=urls.database_url,
            redis_url=urls.redis_url,
            pg_url=libpq_url(urls.database_url),
            where=where,
            own_database=not database_env,
        )


def log_dir_for(home: Path) -> Path:
    """`home`/logs when the home exists (embedded servers), else a fresh temporary one."""
    log_dir = home / "logs" if home.is_dir() else Path(tempfile.mkdtemp(prefix="rb-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir


# -- database ------------------------------------------------------------------------------


def connect(url: str, *, autocommit: bool = True) -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(url, autocommit=autocommit)


def scalar(url: str, sql: str) -> Any:
    with connect(url) as conn:
        row = conn.execute(sql).fetchone()
    return None if row is None else row[0]


def reset_data(
    url: str, redis_url: str, truncate: Sequence[str], vacuum: Sequence[str] = ()
) -> None:
    """Empty `truncate` (CASCADE), VACUUM ANALYZE `vacuum`, flush the Redis database."""
    with connect(url) as conn:
        conn.execute(f"TRUNCATE {', '.join(truncate)} CASCADE")
        if vacuum:
            conn.execute(f"VACUUM ANALYZE {', '.join(vacuum)}")
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


# -- processes -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ManagedProcess:
    """A real ``python -m resumable.cli ...`` subprocess logging to a file."""

    def __init__(
        self,
        name: str,
        command: list[str],
        urls: tuple[str, str],
        env: dict[str, str],
        log_path: Path,
        ready_text: str | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.ready_text = ready_text
        self._log: IO[str] = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "resumable.cli", *command],
            cwd=ROOT,
            env={
                **os.environ,
                **env,
                "DATABASE_URL": urls[0],
                "REDIS_URL": urls[1],
                "PYTHONPATH": str(ROOT),
            },
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited early:\n{self.log_path.read_text()}")

    def started(self) -> bool:
        """Whether the ready text is in the log yet; raises if the process died."""
        self.check_alive()
        return self.ready_text is not None and self.ready_text in self.log_path.read_text()

    def output(self) -> str:
        return self.log_path.read_text()

    def stop(self, timeout: float = 60) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


def start_worker(
    index: int, agent_module: str, urls: tuple[str, str], env: dict[str, str], log_dir: Path
) -> ManagedProcess:
    """A ``resumable worker`` process; ready once it logs "worker started"."""
    return ManagedProcess(
        "worker",
        ["worker", "--agents", agent_module],
        urls,
        env,
        log_dir / f"worker-{index}.log",
        ready_text="worker started",
    )


def stop_all(processes: Sequence[ManagedProcess]) -> None:
    """SIGTERM each (last started first), waiting for it; errors do not stop the rest."""
    errors: list[BaseException] = []
    for process in reversed(processes):
        try:
            process.stop()
        except BaseException as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


# -- waiting and statistics ----------------------------------------------------------------


def wait_for(
    predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]
