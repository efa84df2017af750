"""DATABASE_URL as each library takes it: SQLAlchemy (Alembic, SQLModel) wants
``postgresql+psycopg://``, libpq (psycopg itself) plain ``postgresql://``,
and users write either, or ``postgres://``."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from resumable.errors import ConfigurationError


def sqlalchemy_url(url: str) -> str:
    """Force the psycopg 3 driver whatever scheme the user wrote."""
    if url.startswith("postgres://") or url.startswith("postgres+"):
        url = "postgresql" + url.removeprefix("postgres")  # SQLAlchemy 2 knows only this name
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(
            f"DATABASE_URL must be a PostgreSQL URL, got {parsed.drivername!r}"
        )
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """The same URL in the form libpq (and so psycopg) accepts."""
    return (
        make_url(sqlalchemy_url(url))
        .set(drivername="postgresql")
        .render_as_string(hide_password=False)
    )
