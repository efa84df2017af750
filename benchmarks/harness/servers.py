"""The PostgreSQL and Redis a benchmark runs on, migrated and ready, and how a
benchmark stopped from outside still stops what it started."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resumable._internal.database_urls import libpq_url
from resumable._internal.embedded import service_urls
from resumable.models import migrate
from resumable.settings import Settings

ROOT = Path(__file__).resolve().parents[2]  # the repository root


@dataclass(frozen=True)
class Services:
    """Where the benchmark's PostgreSQL and Redis are, migrated and ready."""

    database_url: str  # as resumable takes it (SQLAlchemy form)
    redis_url: str
    pg_url: str  # the same database in the form libpq/psycopg takes
    where: str  # for the report
    own_database: bool  # an embedded server under the benchmark's home, not DATABASE_URL
    home: Path

    def settings(self, **overrides: Any) -> Settings:
        return Settings(
            database_url=self.database_url, redis_url=self.redis_url, home=self.home, **overrides
        )


@contextlib.contextmanager
def stopped_like_ctrl_c() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt here, as Ctrl-C does.

    By default they end Python at once, skipping every ``finally``: a
    benchmark stopped with ``kill`` (or a ``timeout``) left its web process
    and workers running, their process groups of their own, and they went on
    taking messages from the next run on the same servers. Unwinding instead
    stops every child the way the end of a run does. (SIGKILL still cannot be
    caught: after one, the children live on.)"""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can install handlers
        return
    stops = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def bench_services(home: Path) -> Iterator[Services]:
    """``DATABASE_URL``/``REDIS_URL`` when set, else embedded servers under `home`
    (stopped on exit unless another local process still uses them); migrated.
    Inside, ``kill`` and ``timeout`` stop the benchmark as Ctrl-C does, so what
    it started is stopped too."""
    database_env = os.environ.get("DATABASE_URL")
    redis_env = os.environ.get("REDIS_URL")
    with stopped_like_ctrl_c(), service_urls(database_env, redis_env, home) as urls:
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
            home=home,
        )


def log_dir_for(home: Path) -> Path:
    """`home`/logs when the home exists (embedded servers), else a fresh temporary one."""
    log_dir = home / "logs" if home.is_dir() else Path(tempfile.mkdtemp(prefix="rb-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir


@contextlib.contextmanager
def broker_named(url: str | None) -> Iterator[None]:
    """RESUMABLE_BROKER_URL set to `url` (unset for None: Redis) for what
    starts meanwhile: a deployment's processes and a client inherit it."""
    before = os.environ.pop("RESUMABLE_BROKER_URL", None)
    if url is not None:
        os.environ["RESUMABLE_BROKER_URL"] = url
    try:
        yield
    finally:
        os.environ.pop("RESUMABLE_BROKER_URL", None)
        if before is not None:
            os.environ["RESUMABLE_BROKER_URL"] = before
