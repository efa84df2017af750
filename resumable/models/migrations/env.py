"""Alembic environment: online migrations only, under an advisory lock."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from sqlmodel import SQLModel

from resumable.models import tables as _tables  # noqa: F401 - registers the tables
from resumable.models.migrate import MIGRATION_LOCK_ID

target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        # A session-level lock, taken before Alembic reads alembic_version, so a
        # second concurrent upgrade waits and then sees the new head.
        connection.execute(sa.text("SELECT pg_advisory_lock(:id)"), {"id": MIGRATION_LOCK_ID})
        connection.commit()
        try:
            context.configure(connection=connection, target_metadata=target_metadata)
            with context.begin_transaction():
                context.run_migrations()
        finally:
            connection.execute(sa.text("SELECT pg_advisory_unlock(:id)"), {"id": MIGRATION_LOCK_ID})
            connection.commit()
    engine.dispose()


run_migrations_online()
