"""Configuration, read from the environment (prefix-free names for the URLs,
``RESUMABLE_`` for everything else) so the same code runs under a Procfile,
in tests and on a laptop without a config file."""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, parse_qs, urlsplit

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from resumable._internal.redaction import DEFAULT_KEYS
from resumable._internal.serialization import unstorable_text
from resumable.errors import ConfigurationError

# The Standard Webhooks spec asks for secrets of 24 to 64 random bytes.
_MIN_SECRET_BYTES = 24
_DAY = 86_400.0


class Settings(BaseSettings):
    """Every knob resumable reads. Each field documents itself;
    docs/configuration.md is generated from them.

    Every knob is checked when a process starts (numbers within bounds, URLs
    and secrets well formed), so a typo fails at once, naming the variable,
    instead of an hour later on the first request that needs it."""

    model_config = SettingsConfigDict(
        env_prefix="RESUMABLE_", extra="ignore", populate_by_name=True, allow_inf_nan=False
    )

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "RESUMABLE_DATABASE_URL"),
        description="PostgreSQL URL. Unset: an embedded server is started under `home`.",
    )
    redis_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("REDIS_URL", "RESUMABLE_REDIS_URL"),
        description="Redis URL. Unset: an embedded Valkey server is started under `home`.",
    )
    #: Set: RabbitMQ carries the messages (only AMQP URLs pass its check).
    broker_url: str | None = Field(
        default=None,
        description="The broker that carries queue messages. Unset: Redis at `REDIS_URL`. "
        "An `amqp://` or `amqps://` URL: RabbitMQ (several nodes separated by `;`); Redis "
        "(`REDIS_URL`, or the embedded one) then keeps only rate limits' turns and is "
        "connected on a rate-limited call's first turn.",
    )
    home: Path = Field(
        default=Path(".resumable"),
        description="Directory for local data: embedded servers' data, pid files, logs.",
    )
    agents: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Modules that define agents, imported by workers (comma-separated).",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="`text` for a terminal, `json` for one JSON object per line (log shippers).",
    )
    queue_name: str = Field(
        default="resumable",
        min_length=1,
        max_length=100,
        # dramatiq's own rule for queue names (its workers refuse any other);
        # `.DQ` and `.XQ` name its delay and dead-letter queues.
        pattern=r"^[A-Za-z_][A-Za-z0-9._-]*$",
        description="dramatiq queue for session runs: a letter or `_`, then letters, digits,"
        " `.`, `_` or `-`, at most 100 characters, not ending in `.DQ`, `.XQ` (dramatiq's)"
        " or `.high`, `.low` (its priority lanes: `<queue>.high` and `<queue>.low` are"
        " queues too).",
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        le=_DAY,
        description="How long a worker owns a session without renewing its lease.",
    )
    max_steps_per_run: int = Field(
        default=50,
        gt=0,
        le=1_000_000,
        description="Steps one message may run before the session is re-enqueued (fairness).",
    )
    max_seconds_per_run: float = Field(
        default=30.0,
        gt=0,
        le=_DAY,
        description="Seconds one message may run before the session is re-enqueued (fairness).",
    )
    worker_threads: int = Field(default=8, gt=0, le=1024, description="Threads per worker process.")
    worker_processes: int = Field(
        default=0,
        ge=0,
        le=256,
        description="Processes `resumable worker` runs, each with `RESUMABLE_WORKER_THREADS` "
        "threads, its own lease keeper and its own metrics port (the next one up per process); "
        "0: one per CPU core.",
    )
    worker_prefetch: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="Messages a worker process prefetches; 0 means twice the thread count.",
    )
    priority_aging_seconds: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="A priority's head start: a worker takes a high session's message before "
        "normal ones sent up to this many seconds earlier, and a low one's after normal ones "
        "sent up to this many seconds later (so a low session waits at most about twice this "
        "behind later work, never for ever).",
    )
    max_inflight: int = Field(
        default=500,
        gt=0,
        le=100_000,
        description="Sessions at an `async def` step one worker process runs at once on "
        "its event loop; a thread waits for a free place before it takes another.",
    )
    loop_lag_warning_seconds: float = Field(
        default=1.0,
        gt=0,
        le=_DAY,
        description="Log which async step blocked a worker's event loop for longer than "
        "this (a blocking call inside an `async def` step).",
    )
    heartbeat_timeout_ms: int = Field(
        default=10_000,
        ge=100,
        le=int(_DAY * 1000),
        description="After this long without a worker heartbeat, its unacked messages "
        "are redelivered by another worker (dramatiq's default is 60 s).",
    )
    maintenance_chance: int = Field(
        default=100_000,
        gt=0,
        le=1_000_000,
        description="dramatiq's maintenance lottery, out of 1,000,000 broker calls "
        "(its default is 1,000); 100,000 means 10%, so an idle worker polling every "
        "100 ms notices a dead worker's messages within about a second.",
    )
    db_pool_size: int = Field(
        default=10, gt=0, le=1000, description="Database connections per process."
    )
    db_prepared_statements: bool = Field(
        default=True,
        description="Server-side prepared statements: the claim and the step commit from "
        "their first run on a connection, other statements from their fifth. Set false "
        "behind PgBouncer in transaction mode before 1.21 (or with max_prepared_statements "
        "= 0), which hands each transaction another server connection where a prepared "
        "statement does not exist.",
    )
    reconcile_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        le=_DAY,
        description="A pending session untouched this long is assumed to have lost its "
        "queue message and is re-enqueued by the reconciler.",
    )

    public_url: str = Field(
        default="http://127.0.0.1:8000",
        description="Base URL external systems use to reach the web process; callback URLs "
        "handed to them start with it.",
    )
    api_tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Bearer tokens accepted by the HTTP API (comma-separated). Unset: a "
        "token is generated once and kept in `<home>/api-token` for local use.",
    )
    webhook_secret: str | None = Field(
        default=None,
        description="Standard Webhooks secret (`whsec_...`) that callbacks must be signed "
        "with; several, space-separated, are each accepted (to rotate it). Unset: callbacks "
        "are authenticated by their unguessable token alone.",
    )
    max_body_bytes: int = Field(
        default=1_048_576,
        gt=0,
        le=1 << 30,
        description="Largest request body the web process accepts.",
    )
    web_host: str = Field(
        default="127.0.0.1", min_length=1, description="Address `resumable web` binds."
    )
    web_port: int = Field(default=8000, ge=1, le=65535, description="Port `resumable web` binds.")
    worker_metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port each `resumable worker` serves its own Prometheus `/metrics` on "
        "(step and tool-call durations, resume latency); give each worker process on a host "
        "its own. 0: off, nothing is measured.",
    )
    worker_metrics_host: str = Field(
        default="127.0.0.1", min_length=1, description="Address worker metrics bind."
    )
    scheduler_interval_seconds: float = Field(
        default=1.0,
        ge=0.01,
        le=3600,
        description="How often the scheduler wakes due timers and polls and reconciles.",
    )
    schedule_grace_seconds: float = Field(
        default=60.0,
        ge=1,
        le=_DAY,
        description="A schedule's due time that a scheduler handles later than this after it "
        "(no scheduler ran, or the database was down) is missed: its catch_up policy says "
        "whether it still starts a session.",
    )

    alert_webhook_url: str | None = Field(
        default=None,
        description="Operator webhook: every dead letter and every failed compensation is "
        "POSTed here (with retries). Unset: alerts are only logged at ERROR.",
    )
    alert_webhook_secret: str | None = Field(
        default=None,
        description="Standard Webhooks secret (`whsec_...`) alerts are signed with.",
    )
    alert_max_attempts: int = Field(
        default=10, gt=0, le=1000, description="Delivery attempts per alert before it is given up."
    )
    alert_overdue_seconds: float = Field(
        default=300,
        ge=0,
        le=30 * _DAY,
        description="Alert on a suspended session this long past its timer or deadline "
        "that no one woke (the scheduler is down or behind).",
    )
    alert_unserved_seconds: float = Field(
        default=300,
        ge=0,
        le=30 * _DAY,
        description="Alert on a session that has waited this long for a worker that loads "
        "its agent (none alive does).",
    )
    alert_hung_seconds: float = Field(
        default=600,
        gt=0,
        le=30 * _DAY,
        description="Alert on a running step past its time limit, or running this long "
        "without one (blocked where a time limit cannot reach).",
    )
    alert_blocked_seconds: float = Field(
        default=3600,
        ge=0,
        le=30 * _DAY,
        description="Alert again on a session left `blocked` this long (the first alert "
        "goes out when it is parked).",
    )

    redact_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_KEYS),
        description="Keys whose values never reach the history (checkpoints, tool-call "
        "cache, audit log, dead letters); comma-separated, matched as a key or its "
        "`_suffix`, case-insensitively.",
    )
    retention_days: float | None = Field(
        default=None,
        gt=0,
        le=36_500,
        description="Delete (or archive) sessions that finished more than this many days "
        "ago, with their history, and shared documents' versions older than that (each "
        "document's current version stays). Unset: keep everything.",
    )
    retention_mode: Literal["delete", "archive"] = Field(
        default="delete",
        description="`delete`, or `archive` (one JSON document per session in "
        "`archived_sessions`) before deleting.",
    )
    retention_batch: int = Field(
        default=200, gt=0, le=100_000, description="Sessions retention handles per scheduler pass."
    )
    compact_keep: int | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="Keep only the last this many checkpoints of each session (older ones "
        "are dropped after re-basing the chain on a snapshot). Unset: keep all.",
    )

    @field_validator("agents", "api_tokens", "redact_keys", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        """Accept `a.b,c.d` from the environment as well as a list from code."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("home", mode="before")
    @classmethod
    def _usable_home(cls, value: object) -> object:
        """An empty RESUMABLE_HOME would be the working directory itself (the
        servers' data beside the user's files), and one that is not UTF-8
        fails in the servers only after its directories were made."""
        if isinstance(value, str | Path):
            text = str(value)
            if not text.strip():
                raise ValueError("must not be empty (unset it for .resumable)")
            if unstorable_text(text):
                raise ValueError("must be a UTF-8 path")
        return value

    @field_validator("queue_name")
    @classmethod
    def _not_dramatiqs_own(cls, value: str) -> str:
        if value.endswith((".DQ", ".XQ")):
            raise ValueError("must not end in .DQ or .XQ (dramatiq's delay and dead-letter queues)")
        if value.endswith((".high", ".low")):
            raise ValueError("must not end in .high or .low (the queue's priority lanes)")
        return value

    @field_validator("database_url", "redis_url", "broker_url", "alert_webhook_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """`DATABASE_URL=` in an env file means "not set", as it always has."""
        return None if value == "" else value

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        return None if value is None else checked_database_url(value)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        return None if value is None else checked_redis_url(value)

    @field_validator("broker_url")
    @classmethod
    def _amqp_url(cls, value: str | None) -> str | None:
        return None if value is None else checked_amqp_url(value)

    @field_validator("public_url", "alert_webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else checked_http_url(value)

    @field_validator("webhook_secret", "alert_webhook_secret")
    @classmethod
    def _webhook_secret(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Checked strictly here: the standardwebhooks library pads and accepts
        a malformed secret, which then fails every signature check at run time.
        Blank means unset; callbacks accept several (rotation), alerts sign with one."""
        if value is None or not value.strip():
            return None
        secrets = value.split()
        if info.field_name == "alert_webhook_secret" and len(secrets) > 1:
            raise ValueError("takes one secret (alerts are signed with it)")
        for index, secret in enumerate(secrets, start=1):
            which = f"secret {index} of {len(secrets)}: " if len(secrets) > 1 else ""
            _check_secret(secret, which)
        return " ".join(secrets)

    @property
    def home_dir(self) -> Path:
        """The home directory as an absolute path (processes may change directory)."""
        return self.home.expanduser().resolve()


def env_name(field: str) -> str:
    """The environment variable that sets `field` (pydantic reports a field
    read through an alias by the alias: DATABASE_URL is already one)."""
    name = {"database_url": "DATABASE_URL", "redis_url": "REDIS_URL"}.get(field, field)
    if name in ("DATABASE_URL", "REDIS_URL"):
        # Either spelling sets it: name the one the environment holds.
        prefixed = f"RESUMABLE_{name}"
        return prefixed if prefixed in os.environ and name not in os.environ else name
    return name if name.isupper() else f"RESUMABLE_{name.upper()}"


_BAD_PORT = "has a port that is not a number from 1 to 65535"


def _port_in_range(port: int | None) -> None:
    """A URL's port, when it has one, as a socket can take it: urlsplit
    refuses only past 65535, and libpq and redis-py take 0 or 99999 and then
    fail at the first connection."""
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(_BAD_PORT)


def _split_port(parts: SplitResult) -> None:
    try:
        port = parts.port
    except ValueError:
        raise ValueError(_BAD_PORT) from None
    _port_in_range(port)


def checked_http_url(value: str) -> str:
    """An http(s) URL with a host (RESUMABLE_PUBLIC_URL, an alert webhook, an
    OTLP endpoint); ValueError saying what is wrong."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise ValueError("must not contain control characters")
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    _split_port(parts)
    return value


#: The schemes libpq takes; ``postgres://`` is what many hosts hand out.
POSTGRES_SCHEMES = ("postgresql", "postgres")


def checked_database_url(value: str) -> str:
    """DATABASE_URL as settings take it; ValueError saying what is wrong."""
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme.split("+", 1)[0] not in POSTGRES_SCHEMES:
        raise ValueError("must be a postgresql:// (or postgres://) URL")
    _check_postgres_url(value)
    return value


def checked_redis_url(value: str) -> str:
    """REDIS_URL as settings take it; ValueError saying what is wrong."""
    scheme = value.split("://", 1)[0]
    if scheme not in {"redis", "rediss", "unix"}:
        raise ValueError("must be a redis://, rediss:// or unix:// URL")
    _check_redis_url(value, scheme)
    return value


_AMQP_SCHEMES = ("amqp", "amqps")


def checked_amqp_url(value: str) -> str:
    """RESUMABLE_BROKER_URL as settings take it; ValueError saying what is wrong."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise ValueError("must not contain control characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("must be UTF-8 text") from None
    for one in value.split(";"):
        parts = urlsplit(one)
        if parts.scheme not in _AMQP_SCHEMES or not parts.hostname:
            raise ValueError("must be an amqp:// or amqps:// URL with a host")
        _split_port(parts)
        import pika  # only when RabbitMQ is named: what pika refuses fails now, not at a send

        try:
            params = pika.URLParameters(one)
        except ValueError as exc:
            # pika's words name the option, and quote only its value.
            option = str(exc).split(":", 1)[0].split(" value ", 1)[0]
            raise ValueError(f"pika cannot read it: {option}") from None
        except SyntaxError:  # a dict option (ssl_options, tcp_options) pika evaluates as Python
            raise ValueError("pika cannot read it: an option that is not a literal") from None
        # AMQP carries the heartbeat in 16 bits; pika takes any number and
        # then recurses without end when it connects.
        if isinstance(params.heartbeat, int) and params.heartbeat > 65535:
            raise ValueError("has a heartbeat above 65535 seconds")
    return value


def check_urls(database_url: str | None, redis_url: str | None) -> None:
    """URLs given in code (``Client(database_url=...)``) checked as settings
    check them: ConfigurationError naming the one that is wrong, not its value."""
    for name, value, check in (
        ("DATABASE_URL", database_url, checked_database_url),
        ("REDIS_URL", redis_url, checked_redis_url),
    ):
        if value is None:
            continue
        if not isinstance(value, str):
            raise ConfigurationError(f"invalid setting {name}: must be a string")
        try:
            check(value)
        except ValueError as exc:
            raise ConfigurationError(f"invalid setting {name}: {exc}") from None


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment, with explicit overrides on top.

    Raises ConfigurationError naming every bad variable (never its value,
    which may be a secret)."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [
            f"{env_name(str(error['loc'][0])) if error['loc'] else 'settings'}: "
            + error["msg"].removeprefix("Value error, ")
            for error in exc.errors()
        ]
        raise ConfigurationError("invalid setting " + "; ".join(problems)) from None


# libpq options that take a number: a word there fails only at connect time,
# with an error that quotes the URL.
_NUMERIC_LIBPQ_OPTIONS = (
    "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count", "tcp_user_timeout", "port",
)  # fmt: skip


def _check_postgres_url(value: str) -> None:
    """Parseable as SQLAlchemy and libpq read it: messages never quote the
    URL, which may hold a password."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(value)
        url.port  # noqa: B018 - parsed lazily: a bad port (or IPv6 literal) raises here
    except (ArgumentError, ValueError):
        raise ValueError("is not a valid postgresql:// URL") from None
    _port_in_range(url.port)
    for option in _NUMERIC_LIBPQ_OPTIONS:
        given = url.query.get(option)
        for item in (given,) if isinstance(given, str) else given or ():
            if not item.strip().lstrip("-").isdigit():
                raise ValueError(f"has a {option} that is not a whole number") from None


# A Redis timeout in REDIS_URL: redis-py takes any float, and one past what a
# socket timeout can hold fails at the first command (OverflowError).
_MAX_REDIS_TIMEOUT_SECONDS = _DAY


def _check_redis_url(value: str, scheme: str) -> None:
    """redis-py reads a database number that is not one as database 0, and
    fails only at the first command on an option it cannot read."""
    parts = urlsplit(value)
    _split_port(parts)
    db = parts.path.strip("/") if scheme != "unix" else ""
    for query_db in parse_qs(parts.query).get("db", []):
        db = db or query_db
        if not query_db.isdigit():
            raise ValueError("has a db that is not a database number") from None
    if db and not db.isdigit():
        raise ValueError("names a database that is not a number (redis://host:6379/0)")
    if not parts.query:
        return  # no options: nothing left that redis-py could refuse
    # redis-py (0.2 s to import) only for a URL with options, so a command
    # that never talks to Redis does not load it to read its settings.
    import redis
    from redis.connection import parse_url as redis_parse_url

    try:
        options: dict[str, Any] = redis_parse_url(value)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ValueError(f"has an option redis-py cannot read: {exc}") from None
    # An option redis-py does not know is passed on to the connection, which
    # refuses it only when the first one is made: built here (no I/O), so a
    # typo stops the process at start rather than at its first command.
    pool = redis.ConnectionPool.from_url(value)
    try:
        pool.make_connection()
    except TypeError as exc:
        unknown = [name for name in parse_qs(parts.query) if repr(name) in str(exc)]
        named = f": {', '.join(unknown)}" if unknown else ""
        raise ValueError(f"has an option redis-py does not know{named}") from None
    finally:
        pool.disconnect()
    for option in ("socket_timeout", "socket_connect_timeout"):
        seconds = options.get(option)
        if seconds is not None and not 0 < seconds <= _MAX_REDIS_TIMEOUT_SECONDS:
            raise ValueError(
                f"has a {option} that is not a number of seconds above 0 and at most"
                f" {_MAX_REDIS_TIMEOUT_SECONDS:g}"
            )


def _check_secret(secret: str, which: str) -> None:
    if not secret.startswith("whsec_"):
        raise ValueError(f"{which}must be whsec_ followed by base64 (a Standard Webhooks secret)")
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{which}the part after whsec_ is not valid base64") from None
    if len(key) < _MIN_SECRET_BYTES:
        raise ValueError(
            f"{which}must hold at least {_MIN_SECRET_BYTES} random bytes (got {len(key)})"
        )
