"""Saying in one line which server cannot be reached, where, and why.

The drivers' own errors are long (psycopg appends hints, SQLAlchemy a link,
the pool only says it timed out): an operator needs the setting to check, the
address it points at and the server's reason. The command line uses these to
fail fast before it changes anything; the scheduler to report an outage once.

An outage passes (a server down, restarting or out of reach); a refusal does
not (no such database or role, a wrong password, no right to connect), and a
process that retried one would log it every few seconds forever. The
SQLSTATE says which, but PostgreSQL refuses a connection before libpq has one
to report it on: psycopg raises a bare ``OperationalError`` whose ``sqlstate``
is None. So a refusal is known by its SQLSTATE where psycopg has one (a
statement refused once connected) and otherwise by the server's words, each
mapped to psycopg's class for that SQLSTATE. A server that words its
refusals in another language (``lc_messages``) is taken for an outage, as
any refusal was before.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import psycopg
import psycopg.errors
import sqlalchemy.exc
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


class DatabaseRefusedError(ServiceUnreachableError):
    """PostgreSQL answered and refused the connection for a reason no retry
    fixes (no such database or role, a wrong password, no right to connect)."""

    code = "database_refused"


# Refusals no retry fixes, as psycopg's class for each SQLSTATE.
_NO_DATABASE = psycopg.errors.InvalidCatalogName  # 3D000
_NO_LOGIN = psycopg.errors.InvalidAuthorizationSpecification  # 28000
_WRONG_PASSWORD = psycopg.errors.InvalidPassword  # 28P01
_NO_RIGHT = psycopg.errors.InsufficientPrivilege  # 42501 (no CONNECT, or no access to a table)
# What each says is wrong with the setting.
_REFUSED_BECAUSE: dict[type[psycopg.Error], str] = {
    _NO_DATABASE: "names a database that does not exist",
    _NO_LOGIN: "names a user that may not log in",
    _WRONG_PASSWORD: "names a user whose password is refused",
    _NO_RIGHT: "names a user without the right to use it",
}
# The server's words for each (libpq's own for a missing password), where
# psycopg has no SQLSTATE; the most specific first.
_REFUSAL_WORDS: tuple[tuple[re.Pattern[str], type[psycopg.Error]], ...] = (
    (re.compile(r'database "[^"]*" does not exist'), _NO_DATABASE),
    (re.compile(r'role "[^"]*" does not exist'), _NO_LOGIN),
    (re.compile(r'role "[^"]*" is not permitted to log in'), _NO_LOGIN),
    (re.compile(r"pg_hba\.conf (entry for|rejects)"), _NO_LOGIN),
    (re.compile(r"password authentication failed"), _WRONG_PASSWORD),
    (re.compile(r"fe_sendauth: no password supplied"), _WRONG_PASSWORD),
    (re.compile(r"authentication failed for user"), _NO_LOGIN),
    (re.compile(r"permission denied for database"), _NO_RIGHT),
)


def refusal(exc: BaseException) -> type[psycopg.Error] | None:
    """psycopg's class for the SQLSTATE of a refusal no retry fixes, or None
    (an outage, or not a database error at all)."""
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None:
        exc = exc.orig
    if not isinstance(exc, psycopg.Error):
        return None
    for kind in _REFUSED_BECAUSE:
        if isinstance(exc, kind):
            return kind
    if exc.sqlstate is None:
        text = str(exc)
        for words, kind in _REFUSAL_WORDS:
            if words.search(text):
                return kind
    return None


def refused(exc: BaseException, url: str, setting: str) -> DatabaseRefusedError | None:
    """The one line for a refusal, naming `setting` and what is wrong with it;
    None for an outage."""
    kind = refusal(exc)
    if kind is None:
        return None
    why = reason(exc)
    named = [f"{part} {value!r}" for part, value in _names(url) if value]
    return DatabaseRefusedError(
        f"{setting} {_REFUSED_BECAUSE[kind]} on PostgreSQL at {database_location(url)}"
        f"{' (' + ', '.join(named) + ')' if named else ''}: {why} "
        f"(SQLSTATE {kind.sqlstate}: fix the setting or the server; retrying cannot)",
        reason=why,
    )


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


def _names(url: str) -> list[tuple[str, str]]:
    """The database and the user `url` names (never its password)."""
    try:
        parsed = make_url(url)
    except Exception:
        return []
    return [("database", parsed.database or ""), ("user", parsed.username or "")]


def redis_location(url: str) -> str:
    """``host:port/db``, or the unix socket's path: never the password."""
    if url.startswith("unix://"):
        return url[len("unix://") :].split("?", 1)[0]
    try:
        parsed = make_url(url.replace("rediss://", "redis://", 1))
    except Exception:
        return "an unparsable URL"
    return f"{parsed.host or 'localhost'}:{parsed.port or 6379}/{parsed.database or 0}"


def rabbitmq_location(url: str) -> str:
    """``host:port/vhost`` of the first node named: never the password."""
    first = url.split(";", 1)[0]
    try:
        parts = urlsplit(first)
        port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
    except ValueError:
        return "an unparsable URL"
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    return f"{parts.hostname or 'localhost'}:{port} (vhost {vhost!r})"


def reason(exc: BaseException) -> str:
    """The server's or the network's own words, on one line."""
    inner = exc.args[0] if exc.args else None
    for candidate in (exc, inner):  # dramatiq wraps pika's errors in its ConnectionClosed
        if isinstance(candidate, BaseException) and type(candidate).__module__.startswith("pika"):
            return amqp_reason(candidate)
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None:
        exc = exc.orig
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    """The first line of `exc`'s text, without the client library's framing."""
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
    # Imported here, not above: a one-shot read never loads the broker's
    # libraries, and an exception of theirs exists only once they are loaded.
    import psycopg_pool
    import redis
    from dramatiq.errors import BrokerConnectionError

    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        return "database"
    if isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return "database"
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
        return "database"
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | BrokerConnectionError):
        return "redis"
    pika = sys.modules.get("pika.exceptions")  # RabbitMQ's, once anything loaded them
    if pika is not None and isinstance(exc, pika.AMQPConnectionError | pika.AMQPChannelError):
        return "redis"
    return None


def probe_database(url: str, setting: str = "DATABASE_URL", timeout: float = PROBE_TIMEOUT) -> None:
    """Connect once, outside any pool; raise ServiceUnreachableError naming
    `setting` if that fails."""
    from resumable._internal.database_urls import libpq_url

    try:
        with psycopg.connect(libpq_url(url), connect_timeout=max(1, round(timeout))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        refusal_error = refused(exc, url, setting)
        if refusal_error is not None:
            raise refusal_error from exc
        why = reason(exc)
        raise ServiceUnreachableError(
            f"cannot connect to PostgreSQL at {database_location(url)} "
            f"(database {_database_name(url)!r}, {setting}): {why}",
            reason=why,
        ) from exc


_AMQP_TIMEOUTS = ("socket_timeout", "stack_timeout", "blocked_connection_timeout")


def amqp_parameters(url: str, timeout: float) -> list[Any]:
    """pika's parameters for `url` (several, ``;``-separated, are tried in
    turn: a cluster's nodes), with `timeout` wherever the URL names no
    timeout of its own.

    pika's timeouts cover connecting only: a send on an open connection to
    a host cut off the network waits for a confirm that never comes until
    its heartbeats give up, a minute or more, while the web holds the
    session's row (found by tests/multihost's ``web_broker_cut``). The
    kernel's ``TCP_USER_TIMEOUT`` ends it: data unacknowledged that long
    fails the socket, and the send with it."""
    import pika

    parameters = []
    for one in url.split(";"):
        named = parse_qs(urlsplit(one).query)
        params = pika.URLParameters(one)
        for name in _AMQP_TIMEOUTS:
            if name not in named:
                setattr(params, name, timeout)
        if "tcp_options" not in named:
            params.tcp_options = {"TCP_USER_TIMEOUT": int(timeout * 1000)}
        parameters.append(params)
    return parameters


def amqp_reason(exc: BaseException) -> str:
    """What pika's error says, on one line: pika wraps the socket's error
    (``AMQPConnectionError(AMQPConnectorSocketConnectError(ConnectionRefusedError(...)))``),
    and the server's refusals carry a reply text ("ACCESS_REFUSED - ...")."""
    while True:
        inner = exc.args[0] if exc.args else getattr(exc, "exception", None)
        if not isinstance(inner, BaseException):
            break
        exc = inner
    text = getattr(exc, "reply_text", None)
    if isinstance(text, str) and text:
        return " ".join(text.split())
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    # A refusal at login comes as text: "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - ...'"
    quoted = re.search(r"\(\d+\) '([^']+)'", str(exc))
    if quoted:
        return quoted.group(1)
    # A connection lost mid-call carries the socket's error as its repr:
    # "Stream connection lost: ConnectionResetError(104, 'Connection reset by peer')"
    socket_error = re.search(r"Error\(-?\d+, '([^']+)'\)", str(exc))
    if socket_error:
        return socket_error.group(1)
    # Not ``reason``: it sends pika's errors here (a StreamLostError whose
    # text matched nothing above recursed until Python gave up).
    return _first_line(exc)


def probe_rabbitmq(
    url: str, setting: str = "RESUMABLE_BROKER_URL", timeout: float = PROBE_TIMEOUT
) -> None:
    """Open an AMQP connection once; raise ServiceUnreachableError naming
    `setting` if that fails (refused, unreachable, a bad login or vhost)."""
    import pika
    import pika.exceptions

    try:
        pika.BlockingConnection(amqp_parameters(url, timeout)).close()
    except (pika.exceptions.AMQPError, OSError, ValueError) as exc:
        why = amqp_reason(exc)
        raise ServiceUnreachableError(
            f"cannot connect to RabbitMQ at {rabbitmq_location(url)} ({setting}): {why}",
            reason=why,
        ) from exc


def probe_redis(url: str, setting: str = "REDIS_URL", timeout: float = PROBE_TIMEOUT) -> None:
    """PING once; raise ServiceUnreachableError naming `setting` if that fails."""
    import redis

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
