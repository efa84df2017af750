"""Behind PgBouncer in transaction mode, as many production databases are.

Debian 12's PgBouncer is 1.18: in transaction mode each transaction may run on
another server connection, and a statement prepared on one does not exist on
the next. With ``RESUMABLE_DB_PREPARED_STATEMENTS=false`` every process
prepares nothing, and a workload of steps, recorded tool calls, signals, callbacks (through the web
process) and timers runs through it to the end with every effect made once. The same
workload with prepared statements on shows why the setting exists.

PgBouncer 1.21 and later keep prepared statements in transaction mode
(``max_prepared_statements``). Debian 12 has none; where one is built, name it
with ``RESUMABLE_TEST_PGBOUNCER=/path/to/pgbouncer`` and the same workload runs
through it with prepared statements on (without one, that case is skipped).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
import redis

from benchmarks.harness import pgbouncer
from resumable._internal.database_urls import libpq_url
from resumable.broker.choice import build_broker
from resumable.client import Client
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import LocalDeployment, wait_until
from tests.fake_api import FakeAPI
from tests.waiters import answer_waiters

COUNTERS = 12
SIGNALLED = 6
SLEEPERS = 4
APPROVALS = 4


RECENT_PGBOUNCER = "RESUMABLE_TEST_PGBOUNCER"


@pytest.fixture
def bouncer(settings: Settings, db: Database) -> Iterator[pgbouncer.Bouncer]:
    """The test database behind a PgBouncer 1.18 in transaction mode (clean
    tables first: `db` truncates them on the direct connection)."""
    assert settings.database_url
    with pgbouncer.running(settings.database_url) as running:
        yield running


@pytest.fixture
def recent_bouncer(settings: Settings, db: Database) -> Iterator[pgbouncer.Bouncer]:
    """The test database behind the PgBouncer 1.21+ named by
    ``RESUMABLE_TEST_PGBOUNCER``, keeping prepared statements."""
    program = os.environ.get(RECENT_PGBOUNCER)
    if not program:
        pytest.skip(f"no PgBouncer 1.21+ named by {RECENT_PGBOUNCER}")
    version = pgbouncer.version_of(program)
    assert pgbouncer.keeps_prepared_statements(version), f"{program} is {version}"
    assert settings.database_url
    with pgbouncer.running(
        settings.database_url, program=program, prepared_statements=200
    ) as running:
        yield running


def _client(settings: Settings, url: str, *, prepared: bool) -> Client:
    db = Database(url, pool_size=4, prepared_statements=prepared)
    return Client(
        settings.model_copy(update={"database_url": url, "db_prepared_statements": prepared}),
        db,
        build_broker(settings, settings.redis_url or ""),
    )


def _run_workload(client: Client, api: FakeAPI) -> list[uuid.UUID]:
    """Start every kind of session; answer the signals once they wait."""
    counters = [client.start("counter", {"api": api.url, "steps": 5}) for _ in range(COUNTERS)]
    waiting = [client.start("signalled", {"topic": "go"}) for _ in range(SIGNALLED)]
    sleepers = [client.start("sleeper", {"seconds": 0.5}) for _ in range(SLEEPERS)]
    approvals = [client.start("approval", {}) for _ in range(APPROVALS)]
    answer_waiters(client, waiting, approvals)
    return [*counters, *waiting, *sleepers, *approvals]


def _workload_through(
    settings: Settings,
    bouncer: pgbouncer.Bouncer,
    deployment: LocalDeployment,
    *,
    prepared: bool,
) -> None:
    """Every process of a deployment through `bouncer`; the workload runs to
    the end with each effect made once, and PgBouncer logged no error about
    a prepared statement."""
    env = {
        "DATABASE_URL": bouncer.url,
        "RESUMABLE_DB_PREPARED_STATEMENTS": "true" if prepared else "false",
    }
    deployment.web(**env)
    deployment.worker(**env)
    deployment.worker(**env)
    deployment.scheduler(**env)
    client = _client(settings, bouncer.url, prepared=prepared)
    try:
        with FakeAPI() as api:
            ids = _run_workload(client, api)
            wait_until(
                lambda: all(client.get(i).status == "completed" for i in ids),
                120,
                what="every session to complete",
            )
            assert api.effect_count() == COUNTERS * 5  # one charge per step, none twice
    finally:
        client.db.close()
        client.broker.close()
    assert "PgBouncer 1." in bouncer.version
    log = bouncer.log.read_text()
    assert "prepared statement" not in log


def test_a_workload_runs_to_the_end_behind_pgbouncer_1_18_without_prepared_statements(
    settings: Settings,
    bouncer: pgbouncer.Bouncer,  # before the deployment: it outlives the processes using it
    deployment: LocalDeployment,
    redis_client: redis.Redis,
) -> None:
    _workload_through(settings, bouncer, deployment, prepared=False)


def test_a_workload_runs_to_the_end_behind_pgbouncer_1_21_or_later_with_prepared_statements(
    settings: Settings,
    recent_bouncer: pgbouncer.Bouncer,  # before the deployment, as above
    deployment: LocalDeployment,
    redis_client: redis.Redis,
) -> None:
    _workload_through(settings, recent_bouncer, deployment, prepared=True)


def test_prepared_statements_through_pgbouncer_1_18_break_as_the_setting_says(
    bouncer: pgbouncer.Bouncer,
) -> None:
    """Why the setting exists: a statement prepared in one transaction is not
    found by a later one that PgBouncer runs on another server connection."""
    url = libpq_url(bouncer.url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT %s::int", [1], prepare=True)  # prepared on server connection A
        with psycopg.connect(url) as holder:
            # An open transaction holds A (PgBouncer hands out the server
            # connection used last), so the next statement runs on another.
            holder.execute("SELECT 1")
            with pytest.raises(psycopg.errors.InvalidSqlStatementName, match="does not exist"):
                conn.execute("SELECT %s::int", [1], prepare=True)
