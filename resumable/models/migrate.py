"""Running the Alembic migrations from code (``resumable db upgrade`` and the
Procfile's ``release:``), safe when several processes do it at once."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from resumable._internal.database_urls import sqlalchemy_url
from resumable.errors import NO_SCHEMA_MESSAGE

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

# Held for the whole upgrade so concurrent upgrades run one after the other;
# the second then finds the schema at head and does nothing.
MIGRATION_LOCK_ID = 0x7265_7375_6D65  # "resume"


def alembic_config(database_url: str) -> Config:
    # Alembic (and Mako, and Pygments) cost a one-shot command 0.4 s to import:
    # only the commands that migrate load it.
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(database_url).replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the schema to `revision` (default: the latest)."""
    from alembic import command

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


# Every migration names itself and its parent on lines of their own
# (`revision: str = "0019"`); tests/integration/test_migrations.py checks that
# this reading agrees with Alembic's.
_REVISION_LINE = re.compile(
    r'^(down_revision|revision)\b[^=\n]*=\s*["\']?([^"\'\s]+)', re.MULTILINE
)


@cache
def known_revisions() -> tuple[str, frozenset[str]]:
    """This code's latest revision and every revision it has, read from the
    migration files' headers rather than through Alembic's script directory:
    every command checks the schema, and most never migrate."""
    parents: dict[str, str | None] = {}
    for path in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        fields = {m[1]: m[2] for m in _REVISION_LINE.finditer(path.read_text())}
        if "revision" in fields:
            parent = fields.get("down_revision")
            parents[fields["revision"]] = None if parent == "None" else parent
    children = {parent for parent in parents.values() if parent is not None}
    heads = sorted(set(parents) - children)
    if len(heads) != 1:
        raise RuntimeError(f"the migrations have {len(heads)} heads: {heads}")
    return heads[0], frozenset(parents)


def unknown_revision(found: str) -> str | None:
    """Why `found`, the database's revision, cannot be used or upgraded by this
    code: a newer release migrated it. None if this code knows it."""
    head, known = known_revisions()
    if found in known:
        return None
    return (
        f"the database schema is at revision {found[:40]!r}, which this resumable (at {head})"
        " does not know: a newer release migrated it; upgrade resumable, or use another database"
    )


def schema_problem(conn: Any) -> str | None:
    """Why this code cannot use the schema on `conn` (a psycopg connection),
    in one line saying what to do; None when it is at this code's head. A
    schema behind the code would fail on every statement that touches a
    column it lacks (a worker's every message); one ahead of it was migrated
    by a newer release, whose tables this code may misread."""
    head, known = known_revisions()
    tables = conn.execute(
        "SELECT to_regclass('sessions') IS NOT NULL, to_regclass('alembic_version') IS NOT NULL"
    ).fetchone()
    if not tables[0]:
        return NO_SCHEMA_MESSAGE
    found = None
    if tables[1]:
        row = conn.execute("SELECT version_num FROM alembic_version LIMIT 1").fetchone()
        found = str(row[0]) if row else None
    if found == head:
        return None
    if found is not None and found not in known:
        return unknown_revision(found)
    return (
        f"the database schema is at revision {found or 'none'}, and this resumable needs"
        f" {head}: run `resumable db upgrade`"
    )
