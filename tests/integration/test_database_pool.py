"""The pool's idle check without psycopg_pool's `reset` hook: a connection
that sat idle is checked (and replaced when the server dropped it), one in
steady use is handed out without a round trip."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from resumable._internal.database_urls import libpq_url
from resumable.models.async_database import AsyncDatabase
from resumable.models.database import Database, pipelined_transaction
from resumable.settings import Settings
from resumable.webhooks.app import create_app, running
from tests.conftest import wait_until

T = TypeVar("T")


def test_a_connection_dropped_by_the_server_while_idle_is_replaced(settings: Settings) -> None:
    url = settings.database_url or ""
    with Database(url, pool_size=1) as db:
        with db.connection() as conn:
            pid = conn.info.backend_pid
        assert id(conn) in db._returned_at, "the return time is noted for the idle check"
        with psycopg.connect(libpq_url(url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        db._IDLE_CHECK_SECONDS = 0.0  # as if it had sat idle past the window
        with db.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
            assert conn.info.backend_pid != pid


def test_a_connection_in_steady_use_is_handed_out_unchecked(settings: Settings) -> None:
    url = settings.database_url or ""
    with Database(url, pool_size=1) as db:
        with db.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(libpq_url(url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        db._IDLE_CHECK_SECONDS = 3600.0  # just returned: no check on the way out
        with db.connection() as conn:
            # The dead connection comes back unchecked: its first statement fails,
            # and the pool discards it (a connection in steady use proves itself).
            try:
                conn.execute("SELECT 1")
                raised = False
            except psycopg.OperationalError:
                raised = True
        assert raised
        with db.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}


# -- a run's pinned connection (Database.pinned) -------------------------------------------


def test_a_pinned_thread_reuses_one_connection_and_gives_it_back(settings: Settings) -> None:
    with Database(settings.database_url or "", pool_size=3) as db:
        with db.pinned():
            with db.connection() as first:
                pid = first.info.backend_pid
                # Nested on the same thread: its own connection, as without a pin.
                with db.connection() as nested:
                    assert nested.info.backend_pid != pid
            with db.connection() as again:
                assert again is first
            # Only the pinned one: the nested one went back (a returned connection
            # counts as available once the pool's worker has reset it).
            wait_until(lambda: _in_use(db) == 1, timeout=5, what="the nested connection back")
        wait_until(lambda: _in_use(db) == 0, timeout=5, what="the pinned connection back")


def test_a_time_limit_that_fires_while_a_step_waits_for_a_connection_loses_none(
    settings: Settings,
) -> None:
    """A step's limit landing in the pool's wait left psycopg_pool's waiter
    queued (it catches Exception, the limit is a BaseException); the
    connection later handed to it was never returned. Shielded, the step
    gets it, uses it, gives it back, and the limit lands after."""
    import threading
    import time

    from resumable.errors import StepTimeoutError
    from resumable.queue.time_limits import TimeLimit

    with Database(settings.database_url or "", pool_size=1) as db:
        holder = db.pool.getconn()  # the one connection, held elsewhere
        outcome: list[object] = []

        def step() -> None:
            try:
                with TimeLimit(0.2), db.connection(timeout=10) as conn:
                    outcome.append(conn.execute("SELECT 1").fetchone())
            except StepTimeoutError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=step)
        thread.start()
        time.sleep(0.6)  # the limit fired while the step waited
        db.pool.putconn(holder)
        thread.join(15)
        assert not thread.is_alive()
        assert len(outcome) == 2 and isinstance(outcome[1], StepTimeoutError), outcome
        wait_until(lambda: _in_use(db) == 0, timeout=5, what="every connection back")
        with db.connection(timeout=2) as conn:  # and it can be had again
            assert conn.execute("SELECT 1").fetchone() is not None


def _in_use(db: Database) -> int:
    """Connections out of the pool now (the pool may still be opening its
    minimum in the background, so count what is lent, not what is idle)."""
    stats = db.pool.get_stats()
    return stats.get("pool_size", 0) - stats.get("pool_available", 0)


def test_a_pinned_connection_that_breaks_is_replaced_within_the_run(settings: Settings) -> None:
    url = settings.database_url or ""
    with Database(url, pool_size=2) as db, db.pinned():
        with db.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(libpq_url(url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        try:
            with db.connection() as conn:
                conn.execute("SELECT 1")
            raised = False
        except psycopg.OperationalError:
            raised = True
        assert raised, "the killed backend's connection failed its next statement"
        with db.connection() as conn:  # the pin let the broken one go
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
            assert conn.info.backend_pid != pid


# -- a transaction in pipeline mode (pipelined_transaction) ---------------------------------


def _round_trips(trace: str) -> int:
    """How many times the client waited for the server: in libpq's trace, each
    run of messages the client sent (F) that the server then answered (B)."""
    sides = [line.split("\t", 1)[0] for line in trace.splitlines()]
    return sum(1 for pair in itertools.pairwise(sides) if pair == ("F", "B"))


def test_a_pipelined_transaction_takes_two_round_trips_and_commits_at_its_end(
    settings: Settings, tmp_path: Path
) -> None:
    url = libpq_url(settings.database_url or "")
    with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url) as other:
        conn.execute("DROP TABLE IF EXISTS pipelined_probe")
        conn.execute("CREATE TABLE pipelined_probe (n int)")
        try:
            trace_file = tmp_path / "trace.txt"
            with trace_file.open("w") as trace:
                conn.pgconn.trace(trace.fileno())
                conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
                with pipelined_transaction(conn):
                    conn.execute("INSERT INTO pipelined_probe VALUES (1)")
                    row = conn.execute("SELECT count(*) FROM pipelined_probe").fetchone()
                    assert row == (1,), "a statement's rows are read inside the block"
                    seen = other.execute("SELECT count(*) FROM pipelined_probe").fetchone()
                    assert seen == (0,), "nothing is committed before the block ends"
                    other.rollback()
                conn.pgconn.untrace()
            # A pipeline inside psycopg's conn.transaction() waits three times.
            assert _round_trips(trace_file.read_text()) == 2
            assert other.execute("SELECT count(*) FROM pipelined_probe").fetchone() == (1,)
            other.rollback()
        finally:
            conn.execute("DROP TABLE pipelined_probe")


def test_an_exception_in_a_pipelined_transaction_rolls_it_back(settings: Settings) -> None:
    url = libpq_url(settings.database_url or "")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE pipelined_rollback (n int)")
        for failing in ("SELECT 1 / 0", None):  # the server's error, then the caller's
            expected = (psycopg.errors.DivisionByZero, RuntimeError)
            with pytest.raises(expected), pipelined_transaction(conn):
                conn.execute("INSERT INTO pipelined_rollback VALUES (1)")
                if failing is not None:
                    conn.execute(failing).fetchone()
                raise RuntimeError("the caller gave up")
            assert conn.info.transaction_status == TransactionStatus.IDLE
            assert conn.execute("SELECT count(*) FROM pipelined_rollback").fetchone() == (0,)


# -- the web's async pool (AsyncDatabase) ----------------------------------------------


def _on_a_loop(
    url: str, work: Callable[[AsyncDatabase], Awaitable[T]], *, prepare_threshold: int | None = 5
) -> T:
    async def run() -> T:
        adb = AsyncDatabase(url, pool_size=1, pool_timeout=5, prepare_threshold=prepare_threshold)
        await adb.open()
        try:
            return await work(adb)
        finally:
            await adb.close()

    return asyncio.run(run())


def test_an_async_connection_dropped_while_idle_is_replaced_and_one_in_use_is_not_checked(
    settings: Settings,
) -> None:
    url = settings.database_url or ""

    async def work(adb: AsyncDatabase) -> None:
        async with adb.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(libpq_url(url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        adb._IDLE_CHECK_SECONDS = 3600.0  # just returned: handed out unchecked
        with pytest.raises(psycopg.OperationalError):
            async with adb.connection() as conn:
                await conn.execute("SELECT 1")
        async with adb.connection() as conn:  # the broken one was discarded
            pid = conn.info.backend_pid
        with psycopg.connect(libpq_url(url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        adb._IDLE_CHECK_SECONDS = 0.0  # as if it had sat idle past the window
        async with adb.connection() as conn:
            row = await (await conn.execute("SELECT 1 AS one")).fetchone()
            assert row == {"one": 1}
            assert conn.info.backend_pid != pid

    _on_a_loop(url, work)


@pytest.mark.parametrize("prepared", [True, False])
def test_the_async_pool_follows_the_prepared_statements_setting(
    settings: Settings, prepared: bool
) -> None:
    """RESUMABLE_DB_PREPARED_STATEMENTS=false (PgBouncer before 1.21) holds for
    the callback route's pool too: nothing is prepared on its connections."""

    async def work(adb: AsyncDatabase) -> tuple[int | None, int]:
        async with adb.connection() as conn:
            for _ in range(8):
                await conn.execute("SELECT %s::int AS n", [1])
            cursor = await conn.execute("SELECT count(*) AS n FROM pg_prepared_statements")
            row = await cursor.fetchone()
            assert row is not None
            return conn.prepare_threshold, int(str(row["n"]))

    # The threshold the web passes: its sync pool's, from the setting.
    sync = Database(settings.database_url or "", pool_size=1, prepared_statements=prepared)
    sync.close()
    threshold, prepared_here = _on_a_loop(
        settings.database_url or "", work, prepare_threshold=sync.prepare_threshold
    )
    assert (threshold is not None) is prepared
    assert (prepared_here > 0) is prepared, prepared_here


@pytest.mark.parametrize("prepared", [True, False])
def test_the_web_builds_its_async_pool_with_the_setting_s_threshold(
    settings: Settings, prepared: bool
) -> None:
    """The wiring itself: the app's lifespan gives the callback route's pool
    the threshold RESUMABLE_DB_PREPARED_STATEMENTS decides."""
    configured = settings.model_copy(update={"db_prepared_statements": prepared})
    app = create_app(configured)

    async def threshold() -> int | None:
        async with running(app) as web, web.callbacks.db.connection() as conn:
            return conn.prepare_threshold

    assert (asyncio.run(threshold()) is not None) is prepared
