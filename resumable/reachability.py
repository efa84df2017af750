"""Saying in one line which server cannot be reached, where, and why.

The drivers' own errors are long (psycopg appends hints, SQLAlchemy a link,
the pool only says it timed out): an operator needs the setting to check, the
address it points at and the server's reason. The command line uses these to
fail fast before it changes anything; the scheduler to report an outage once.
"""

from __future__ import annotations

import re
from typing import Literal

import psycopg
import psycopg_pool
import redis
import sqlalchemy.exc
from dramatiq.errors import BrokerConnectionError
from sqlalchemy.engine import make_url

from resumable.errors import ResumableError

Server = Literal["database", "redis"]

# Seconds a probe waits for a server before calling it unreachable.
PROBE_TIMEOUT = 3.0


class ServiceUnreachableError(ResumableError):
    """A server resumable needs (PostgreSQL or Redis) cannot be reached."""

    code = "service_unreachable"

    def __init__(self, message: str | None = None, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or self.message


def database_location(url: str) -> str:
    """``host:port``, or the socket's directory: never the user or password."""
    try:
        parsed = make_url(url)
    except Exception:
        return "an unparsable URL"
    socket_dir = parsed.query.get("host")
    if isinstance(socket_dir, tuple):
        socket_dir = socket_dir[0] if socket_dir else None
    host = parsed.host or socket_dir or "localhost"
    return host if host.startswith("/") else f"{host}:{parsed.port or 5432}"


def _database_name(url: str) -> str:
    try:
        return make_url(url).database or ""
    except Exception:
        return ""


def redis_location(url: str) -> str:
    """``host:port/db``, or the unix socket's path: never the password."""
    if url.startswith("unix://"):
        return url[len("unix://") :].split("?", 1)[0]
    try:
        parsed = make_url(url.replace("rediss://", "redis://", 1))
    except Exception:
        return "an unparsable URL"
    return f"{parsed.host or 'localhost'}:{parsed.port or 6379}/{parsed.database or 0}"


def reason(exc: BaseException) -> str:
    """The server's or the network's own words, on one line."""
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None:
        exc = exc.orig
    text = str(exc).strip() or type(exc).__name__
    first = text.splitlines()[0]
    # psycopg: 'connection failed: connection to server at "h", port 1 failed: <why>'
    if " failed: " in first:
        first = first.rsplit(" failed: ", 1)[1]
    first = first.removeprefix("FATAL:").strip()
    # redis-py: 'Error 111 connecting to 127.0.0.1:1. Connection refused.'
    first = re.sub(r"^Error -?\d+ connecting to \S+?\.\s+", "", first).rstrip(".")
    return " ".join(first.split())


def which_server(exc: BaseException) -> Server | None:
    """The server an exception says is unreachable, or None if it is not that kind."""
    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        return "database"
    if isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return "database"
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
        return "database"
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | BrokerConnectionError):
        return "redis"
    return None


def probe_database(url: str, setting: str = "DATABASE_URL", timeout: float = PROBE_TIMEOUT) -> None:
    """Connect once, outside any pool; raise ServiceUnreachableError naming
    `setting` if that fails."""
    from resumable.models.database import libpq_url

    try:
        with psycopg.connect(libpq_url(url), connect_timeout=max(1, round(timeout))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        why = reason(exc)
        raise ServiceUnreachableError(
            f"cannot connect to PostgreSQL at {database_location(url)} "
            f"(database {_database_name(url)!r}, {setting}): {why}",
            reason=why,
        ) from exc


def probe_redis(url: str, setting: str = "REDIS_URL", timeout: float = PROBE_TIMEOUT) -> None:
    """PING once; raise ServiceUnreachableError naming `setting` if that fails."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as exc:
        why = reason(exc)
        raise ServiceUnreachableError(
            f"cannot connect to Redis at {redis_location(url)} ({setting}): {why}", reason=why
        ) from exc
