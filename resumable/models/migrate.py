"""Running the Alembic migrations from code (``resumable db upgrade`` and the
Procfile's ``release:``), safe when several processes do it at once."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from resumable.models.database import sqlalchemy_url

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

# Held for the whole upgrade so concurrent upgrades run one after the other;
# the second then finds the schema at head and does nothing.
MIGRATION_LOCK_ID = 0x7265_7375_6D65  # "resume"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(database_url).replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the schema to `revision` (default: the latest)."""
    command.upgrade(alembic_config(database_url), revision)


def current_revision(database_url: str) -> str | None:
    import sqlalchemy as sa
    from alembic.runtime.migration import MigrationContext

    engine = sa.create_engine(sqlalchemy_url(database_url))
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
