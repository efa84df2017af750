"""What every benchmark script needs besides what it measures: the servers, the
database, the resumable processes, and starting and waiting for sessions.

The scripts run as ``.venv/bin/python benchmarks/NAME.py`` and import this module
as ``benchmarks.harness`` (they put the repository root on ``sys.path`` first).
Processes are spawned and stopped the way ``resumable dev``, the demo and the
tests do it (``resumable/dev/processes.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import psycopg
import redis
from psycopg.rows import tuple_row

from resumable._internal.database_urls import libpq_url
from resumable._internal.embedded import service_urls
from resumable.broker.redis import build_broker
from resumable.client import Client
from resumable.dev.processes import Deployment, Process, free_port
from resumable.models import migrate
from resumable.models.database import Database
from resumable.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
BENCH_TAG = "/* bench */"  # marks the benchmark's own statements in pg_stat_statements
DEFAULT_POOL_SIZE = Settings.model_fields["db_pool_size"].default
START_TIMEOUT = 60.0
# A worker stopping finishes its steps in flight first.
STOP_GRACE_SECONDS = 60.0


# -- servers -------------------------------------------------------------------------------


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


def settle(conn: psycopg.Connection[Any], tables: Sequence[str]) -> None:
    """VACUUM ANALYZE `tables`, then CHECKPOINT (where allowed): a measured phase
    then starts from the same state whatever ran before it. Otherwise the dead
    rows and dirty pages of the phase before are cleaned up during the next one
    (autovacuum, the checkpointer), whose PostgreSQL CPU and time they swell:
    a 10,000-timer burst right after bursts.py's step-rate phase took 13-28 s
    (PostgreSQL 1.6-4.4 ms of CPU per session), settled first 9.1-9.3 s (0.9 ms),
    and whichever of the burst and the direct wake ran first paid for it."""
    conn.execute(f"VACUUM ANALYZE {', '.join(tables)}")
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
        conn.execute("CHECKPOINT")


# -- processes -----------------------------------------------------------------------------


def worker_env(threads: int, **extra: str) -> dict[str, str]:
    """A worker with `threads` threads and a pool large enough for them, in one
    process (a benchmark's ``--workers`` counts processes)."""
    return {
        "RESUMABLE_WORKER_PROCESSES": "1",
        "RESUMABLE_WORKER_THREADS": str(threads),
        "RESUMABLE_DB_POOL_SIZE": str(max(DEFAULT_POOL_SIZE, threads + 2)),
        **extra,
    }


class BenchDeployment:
    """The benchmark's ``resumable web`` and ``worker`` processes on its servers,
    logging to `log_dir`; all stopped on the way out."""

    def __init__(self, services: Services, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.processes = Deployment(
            {
                **env,
                "DATABASE_URL": services.database_url,
                "REDIS_URL": services.redis_url,
                "PYTHONPATH": str(ROOT),
            },
            log_dir,
            cwd=ROOT,
            grace_seconds=STOP_GRACE_SECONDS,
        )
        self.workers: list[Process] = []
        self.web: Process | None = None
        self.url = ""

    def start_workers(self, count: int, agent_module: str) -> list[Process]:
        """`count` workers of `agent_module`, once all have started."""
        started = [
            self.processes.worker(agent_module, name=f"worker-{len(self.workers) + index}")
            for index in range(count)
        ]
        self.workers += started
        for worker in started:
            worker.wait_ready(START_TIMEOUT)
        return started

    def start_web(self, **env: str) -> str:
        """A web process on a free port, once it serves; its base URL. Start it
        before the workers, so the callback URLs they hand out point at it."""
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        # Every process started from now on hands out callback URLs pointing here.
        self.processes.env["RESUMABLE_PUBLIC_URL"] = self.url
        self.web = self.processes.web(port, **env)
        self.web.wait_ready(START_TIMEOUT)
        return self.url

    @property
    def pids(self) -> list[int]:
        return [child.pid for child in self.processes.children]

    def check_alive(self) -> None:
        self.processes.check_alive()

    def __enter__(self) -> BenchDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.processes.stop_all()


# -- sessions ------------------------------------------------------------------------------


@contextlib.contextmanager
def bench_client(settings: Settings, pool_size: int) -> Iterator[Client]:
    """A Client on its own pool and broker, closed on the way out."""
    assert settings.database_url and settings.redis_url
    db = Database(settings.database_url, pool_size=pool_size)
    broker = build_broker(settings, settings.redis_url)
    try:
        yield Client(settings, db, broker)
    finally:
        broker.close()
        db.close()


def start_sessions(
    client: Client, agent: str, inputs: Iterable[dict[str, Any] | None], threads: int
) -> list[Any]:
    """``Client.start`` of `agent` once per input, from `threads` threads; the ids."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda session_input: client.start(agent, session_input), inputs))


def wait_sessions(
    conn: psycopg.Connection[Any],
    done: Callable[[Counter[str]], bool],
    *,
    what: str,
    timeout: float,
    ids: Sequence[Any] | None = None,
    agent: str | None = None,
    alive: Callable[[], None] = lambda: None,
    interval: float = 0.01,
) -> int:
    """Poll the sessions' counts by status (of `ids`, of `agent`'s, or all)
    until `done(counts)`.

    By `agent` for thousands of sessions: ``id = ANY(<10,000 ids>)`` in a
    prepared statement planned on a table analyzed when it was nearly empty
    is a sequential scan comparing every row with every id (0.7-0.9 s a poll
    in a 10,000-session burst, measured: a core taken from what it measured).

    Raises if a session failed or was cancelled, if `alive()` raises (a process
    died) or after `timeout` seconds. Returns the number of polls, one
    transaction each on an autocommit connection.
    """
    where, params = "", list[Any]()
    if ids is not None:
        where, params = " WHERE id = ANY(%s::uuid[])", [[str(session_id) for session_id in ids]]
    elif agent is not None:
        where, params = " WHERE agent = %s", [agent]
    sql = f"SELECT status, count(*) FROM sessions {BENCH_TAG}{where} GROUP BY status"
    deadline = time.monotonic() + timeout
    polls = 0
    with conn.cursor(row_factory=tuple_row) as cursor:
        while True:
            counts = Counter({str(status): int(n) for status, n in cursor.execute(sql, params)})
            polls += 1
            if counts["failed"] or counts["cancelled"]:
                raise RuntimeError(f"sessions failed ({dict(counts)}); see the worker logs")
            if done(counts):
                return polls
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}: {counts}")
            alive()
            time.sleep(interval)


def join_or_kill(children: Iterable[BaseProcess], timeout: float) -> None:
    """Wait up to `timeout` for each multiprocessing child, then kill what is left
    (the scripts' own helper processes: raw clients, a BLPOP waiter)."""
    for child in children:
        child.join(timeout=timeout)
        if child.is_alive():
            child.kill()
            child.join()
