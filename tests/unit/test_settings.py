"""Settings are checked when a process starts: every numeric knob has bounds,
URLs and secrets are well formed, and an error names the variable (never its
value)."""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path
from typing import Any

import annotated_types
import pytest

from resumable._internal.database_urls import libpq_url
from resumable.errors import ConfigurationError
from resumable.settings import Settings, env_name, load_settings

GOOD_SECRET = "whsec_" + base64.b64encode(b"x" * 24).decode()


def _bounds(field: str) -> tuple[float | None, float | None]:
    low = high = None
    for item in Settings.model_fields[field].metadata:
        # The bounds are numbers; their declared types are comparison protocols.
        if isinstance(item, annotated_types.Gt | annotated_types.Ge):
            low = float(str(item.gt if isinstance(item, annotated_types.Gt) else item.ge))
        if isinstance(item, annotated_types.Lt | annotated_types.Le):
            high = float(str(item.lt if isinstance(item, annotated_types.Lt) else item.le))
    return low, high


NUMERIC = [
    name
    for name, info in Settings.model_fields.items()
    if info.annotation in (int, float, int | None, float | None)
]


def test_every_numeric_knob_is_bounded_on_both_sides() -> None:
    assert len(NUMERIC) >= 15
    unbounded = [name for name in NUMERIC if None in _bounds(name)]
    assert unbounded == []


@pytest.mark.parametrize("field", NUMERIC)
def test_a_value_past_either_bound_names_the_variable(
    field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    low, high = _bounds(field)
    assert low is not None and high is not None
    for value in (high * 10 + 1, low - 1, math.inf):
        monkeypatch.setenv(env_name(field), str(value))
        with pytest.raises(ConfigurationError, match=f"invalid setting {env_name(field)}: "):
            load_settings()


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("RESUMABLE_WEBHOOK_SECRET", "whsec_abc", "not valid base64"),
        ("RESUMABLE_WEBHOOK_SECRET", "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", "must be whsec_"),
        ("RESUMABLE_ALERT_WEBHOOK_SECRET", "whsec_" + "QUJD", "at least 24 random bytes"),
        ("DATABASE_URL", "mysql://u@h/db", "must be a postgresql:// (or postgres://) URL"),
        ("DATABASE_URL", "postgresfoo://u@h/db", "must be a postgresql:// (or postgres://) URL"),
        ("REDIS_URL", "http://h:6379", "redis://"),
        ("RESUMABLE_PUBLIC_URL", "127.0.0.1:8000", "http:// or https://"),
        ("RESUMABLE_ALERT_WEBHOOK_URL", "ftp://ops", "http:// or https://"),
        ("RESUMABLE_WEB_PORT", "80000", "less than or equal to 65535"),
        ("RESUMABLE_QUEUE_NAME", "", "at least 1 character"),
        # Once accepted: the message went to a queue no worker can consume.
        ("RESUMABLE_QUEUE_NAME", "a b", "should match pattern"),
        ("RESUMABLE_QUEUE_NAME", "1abc", "should match pattern"),
        ("RESUMABLE_QUEUE_NAME", "é", "should match pattern"),
        ("RESUMABLE_QUEUE_NAME", "a\x01", "should match pattern"),
        ("RESUMABLE_QUEUE_NAME", "q" * 101, "at most 100 characters"),
        ("RESUMABLE_QUEUE_NAME", "runs.DQ", "must not end in .DQ or .XQ"),
        # Once "unexpected ValueError ... (a bug)" quoting part of the URL, or
        # (a Redis database that is no number) silently database 0.
        ("DATABASE_URL", "postgresql://u:pw@[::1/db", "is not a valid postgresql:// URL"),
        ("DATABASE_URL", "postgresql://u:pw@h:abc/db", "is not a valid postgresql:// URL"),
        ("DATABASE_URL", "postgresql://u:pw@h/db?connect_timeout=abc", "connect_timeout"),
        ("RESUMABLE_DATABASE_URL", "postgresql://u:pw@[::1/db", "not a valid postgresql"),
        ("REDIS_URL", "redis://h:6379/abc", "names a database that is not a number"),
        ("REDIS_URL", "redis://h:6379?db=x", "a db that is not a database number"),
        ("REDIS_URL", "redis://h:port/0", "a port that is not a number"),
        # Ports a socket cannot take: accepted, then every connection failed
        # (or, for the public URL, callback URLs nobody could reach were handed out).
        ("REDIS_URL", "redis://h:99999/0", "port that is not a number from 1 to 65535"),
        ("REDIS_URL", "redis://h:0/0", "port that is not a number from 1 to 65535"),
        ("DATABASE_URL", "postgresql://u:pw@h:99999/db", "from 1 to 65535"),
        ("RESUMABLE_PUBLIC_URL", "http://h:99999", "from 1 to 65535"),
        ("RESUMABLE_ALERT_WEBHOOK_URL", "https://h:0/alerts", "from 1 to 65535"),
        ("RESUMABLE_PUBLIC_URL", "http://a\x01b", "control characters"),
        # Once "unexpected ValueError"/"OverflowError" at the first Redis
        # command, and the working directory as the home.
        ("REDIS_URL", "redis://h:6379/0?socket_timeout=abc", "cannot read"),
        ("REDIS_URL", "redis://h:6379/0?socket_timeout=1e400", "socket_timeout"),
        ("REDIS_URL", "redis://h:6379/0?socket_connect_timeout=0", "socket_connect_timeout"),
        # Once a worker's "unexpected TypeError (a bug)", a CLI command that
        # went on, and a scheduler logging a traceback at every tick.
        ("REDIS_URL", "redis://h:6379/0?socket_timout=5", "does not know: socket_timout"),
        ("REDIS_URL", "redis://:pw@h:6379/0?bogus_opt=1", "does not know: bogus_opt"),
        ("RESUMABLE_BROKER_URL", "redis://h:6379/0", "amqp:// or amqps://"),
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@/", "amqp:// or amqps:// URL with a host"),
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@h:99999/", "from 1 to 65535"),
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@h/\x01", "control characters"),
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@h/;http://h", "amqp:// or amqps://"),
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@h/?bogus=1", "Unknown URL parameter"),
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@h/?heartbeat=abc", "Invalid heartbeat"),
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@h/?socket_timeout=-1", "socket_timeout"),
        # Once a worker's RecursionError when it connected, and a SyntaxError
        # traceback at start, and (a lone surrogate) an encoding error then.
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@h/?heartbeat=" + "9" * 40, "heartbeat above"),
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@h/?ssl_options=%7Bbad", "not a literal"),
        ("RESUMABLE_BROKER_URL", "amqp://u:pw@h/v\udcff", "UTF-8"),
        ("RESUMABLE_HOME", "", "must not be empty"),
        ("RESUMABLE_HOME", "data\udcff", "UTF-8"),
    ],
)
def test_malformed_values_are_refused_naming_the_variable_not_the_value(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, why: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert f"{variable}: " in caught.value.message and why in caught.value.message
    if "SECRET" in variable or "URL" in variable:
        assert value not in caught.value.message and "pw" not in caught.value.message


def test_good_values_pass_and_an_empty_url_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESUMABLE_WEBHOOK_SECRET", GOOD_SECRET)
    monkeypatch.setenv("DATABASE_URL", "")
    monkeypatch.setenv("REDIS_URL", "unix:///tmp/valkey.sock")
    monkeypatch.setenv("RESUMABLE_PUBLIC_URL", "https://[::1]:8443/base")
    settings = load_settings()
    assert settings.webhook_secret == GOOD_SECRET
    assert settings.database_url is None
    assert settings.redis_url == "unix:///tmp/valkey.sock"
    for options in (  # options redis-py knows pass, on every kind of URL
        "redis://h:6379/0?socket_timeout=5&health_check_interval=3&client_name=w",
        "rediss://h:6380/1?ssl_cert_reqs=none",
        "unix:///tmp/valkey.sock?db=2&retry_on_timeout=yes",
    ):
        monkeypatch.setenv("REDIS_URL", options)
        assert load_settings().redis_url == options


def test_webhook_secrets_blank_means_unset_and_several_rotate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESUMABLE_WEBHOOK_SECRET", "  ")
    assert load_settings().webhook_secret is None
    other = "whsec_" + base64.b64encode(b"y" * 24).decode()
    monkeypatch.setenv("RESUMABLE_WEBHOOK_SECRET", f"{GOOD_SECRET}  {other}")
    assert load_settings().webhook_secret == f"{GOOD_SECRET} {other}"
    monkeypatch.setenv("RESUMABLE_WEBHOOK_SECRET", f"{GOOD_SECRET} whsec_abc")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert "secret 2 of 2" in caught.value.message and "whsec_abc" not in caught.value.message
    monkeypatch.setenv("RESUMABLE_ALERT_WEBHOOK_SECRET", f"{GOOD_SECRET} {other}")
    monkeypatch.setenv("RESUMABLE_WEBHOOK_SECRET", GOOD_SECRET)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert "RESUMABLE_ALERT_WEBHOOK_SECRET" in caught.value.message


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


@pytest.mark.parametrize("field", NUMERIC)
def test_the_readme_states_each_range(field: str) -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    [row] = re.findall(rf"^\| `{env_name(field)}` \|.*$", readme, flags=re.MULTILINE)
    low, high = _bounds(field)
    assert low is not None and high is not None
    exclusive = any(
        isinstance(m, annotated_types.Gt) for m in Settings.model_fields[field].metadata
    )
    lower = f"more than {_number(low)}" if exclusive else f"at least {_number(low)}"
    assert f"Allowed: {lower}, at most {_number(high)}." in row


@pytest.mark.parametrize(
    ("given", "variable"),
    [
        ({"database_url": "not a url"}, "DATABASE_URL"),  # once SQLAlchemy's ArgumentError
        ({"database_url": "postgresql://u:pw@h:abc/db"}, "DATABASE_URL"),
        ({"redis_url": "redis://h:6379/0?socket_timeout=abc"}, "REDIS_URL"),
        ({"redis_url": 5}, "REDIS_URL"),
    ],
)
def test_urls_given_to_a_client_are_checked_as_settings_are(
    given: dict[str, Any], variable: str
) -> None:
    from resumable import Client

    with pytest.raises(ConfigurationError) as caught:
        Client(**given)
    assert caught.value.message.startswith(f"invalid setting {variable}: ")
    assert "pw" not in caught.value.message


@pytest.mark.parametrize("scheme", ["postgres", "postgresql", "postgresql+psycopg"])
def test_the_postgres_schemes_libpq_takes_are_taken(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    """Hosts hand out ``postgres://``; every process must start on it."""
    monkeypatch.setenv("DATABASE_URL", f"{scheme}://u:pw@h:5433/db")
    settings = load_settings()
    assert settings.database_url == f"{scheme}://u:pw@h:5433/db"
    assert libpq_url(settings.database_url).startswith("postgresql://u:pw@h:5433/db")


def test_a_rabbitmq_broker_url_passes_and_an_empty_one_means_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "amqp://guest:guest@rabbit-1:5672/%2F?heartbeat=30;amqps://rabbit-2/prod"
    monkeypatch.setenv("RESUMABLE_BROKER_URL", url)
    assert load_settings().broker_url == url
    monkeypatch.setenv("RESUMABLE_BROKER_URL", "")
    assert load_settings().broker_url is None
