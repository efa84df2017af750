"""Telling a refusal no retry fixes from an outage that passes, as the
processes do at start (``reachability.refusal``). A refused connection
reaches psycopg with no SQLSTATE: these are the texts libpq hands it
(test_cli_errors.py starts the processes against a real server's refusals)."""

from __future__ import annotations

import psycopg
import psycopg.errors
import pytest
import sqlalchemy.exc

from resumable._internal.reachability import DatabaseRefusedError, refusal, refused

_AT = 'connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL:  '


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (_AT + 'database "shop" does not exist', psycopg.errors.InvalidCatalogName),
        (_AT + 'role "shop" does not exist', psycopg.errors.InvalidAuthorizationSpecification),
        (
            _AT + 'role "shop" is not permitted to log in',
            psycopg.errors.InvalidAuthorizationSpecification,
        ),
        (
            _AT + 'no pg_hba.conf entry for host "10.0.0.9", user "shop", database "shop", '
            "no encryption",
            psycopg.errors.InvalidAuthorizationSpecification,
        ),
        (
            _AT + 'password authentication failed for user "shop"',
            psycopg.errors.InvalidPassword,
        ),
        (
            'connection failed: connection to server at "10.0.0.5", port 5432 failed: '
            "fe_sendauth: no password supplied",
            psycopg.errors.InvalidPassword,
        ),
        (
            _AT + 'Peer authentication failed for user "shop"',
            psycopg.errors.InvalidAuthorizationSpecification,
        ),
        (
            _AT + 'permission denied for database "shop"\nDETAIL:  User does not have CONNECT',
            psycopg.errors.InsufficientPrivilege,
        ),
    ],
)
def test_a_refusal_is_known_by_the_servers_words(text: str, kind: type[psycopg.Error]) -> None:
    assert refusal(psycopg.OperationalError(text)) is kind
    wrapped = sqlalchemy.exc.OperationalError("SELECT 1", {}, psycopg.OperationalError(text))
    assert refusal(wrapped) is kind


@pytest.mark.parametrize(
    "text",
    [
        'connection failed: connection to server at "10.0.0.5", port 5432 failed: '
        "Connection refused\n\tIs the server running on that host and accepting TCP/IP?",
        "connection timeout expired",
        "failed to resolve host 'db.internal': [Errno -3] Temporary failure in name resolution",
        _AT + "sorry, too many clients already",
        _AT + "remaining connection slots are reserved for roles with the SUPERUSER attribute",
        _AT + "the database system is starting up",
        _AT + "the database system is shutting down",
        "server closed the connection unexpectedly",
        "couldn't get a connection after 2.00 sec",
    ],
)
def test_an_outage_is_not_a_refusal(text: str) -> None:
    assert refusal(psycopg.OperationalError(text)) is None


def test_a_refusal_with_its_sqlstate_is_known_by_its_class() -> None:
    """Once connected, psycopg has the SQLSTATE (a role without access to
    resumable's tables); a statement's own error is no refusal."""
    denied = psycopg.errors.InsufficientPrivilege("permission denied for table alembic_version")
    assert refusal(denied) is psycopg.errors.InsufficientPrivilege
    assert refusal(psycopg.errors.QueryCanceled("canceling statement")) is None
    # A statement that merely mentions a missing database is not a refusal to connect.
    assert refusal(psycopg.errors.SyntaxError('database "x" does not exist')) is None
    assert refusal(ValueError('database "x" does not exist')) is None


def test_the_line_names_the_setting_and_what_is_wrong_never_the_password() -> None:
    url = "postgresql://shop:s3cret@db.internal:6432/shopdb"
    error = refused(psycopg.OperationalError(_AT + 'database "shopdb" does not exist'), url, "X")
    assert isinstance(error, DatabaseRefusedError)
    assert error.message.startswith("X names a database that does not exist on PostgreSQL at ")
    for part in ("db.internal:6432", "database 'shopdb'", "user 'shop'", "SQLSTATE 3D000"):
        assert part in error.message, (part, error.message)
    assert 'database "shopdb" does not exist' in error.message
    assert "s3cret" not in error.message and "\n" not in error.message
    assert refused(psycopg.OperationalError("connection timeout expired"), url, "X") is None
