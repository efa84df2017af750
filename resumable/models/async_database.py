"""An asyncio pool of connections to PostgreSQL, for the web process's hot
route: an external system's callback.

Every other route hands its database work to a thread (``database_call``),
which costs a thread switch each way and a place in anyio's thread limiter.
Measured in the web process (``benchmarks/web_db_paths.py``), a callback's
transaction awaited on the event loop costs 0.16-0.35 ms less CPU, serves
1.3-1.5x the requests and halves the p99 under eight concurrent senders. A
worker's loop measured the other way (``benchmarks/commit_paths.py``), so
only the web process uses this pool.

Its connections are opened as the sync pool's are (autocommit, the same
prepared-statement rule, the same connect timeout), and one that sat idle
is checked before it is lent, so that after a server restart the first
callback does not meet a dead connection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from resumable._internal.database_urls import libpq_url, sqlalchemy_url
from resumable.models.database import IDLE_CHECK_SECONDS, connection_kwargs

AsyncConn = psycopg.AsyncConnection[dict[str, object]]


@asynccontextmanager
async def apipelined_transaction(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """``pipelined_transaction`` on an async connection: the BEGIN goes out
    with the block's first statements, the COMMIT with the final sync (two
    round trips in all); an exception rolls the transaction back.

    A cancellation (a request past its deadline, see ``database_await``)
    closes the connection instead: the server that did not answer in time
    would hold a ROLLBACK as long, and psycopg's cancel request, sent when the
    task was cancelled, could otherwise reach a later statement on the same
    connection back in the pool. Closing is local; the pool discards it."""
    try:
        async with conn.pipeline():
            await conn.execute("BEGIN")
            yield
            await conn.execute("COMMIT")
    except asyncio.CancelledError:
        await conn.close()
        raise
    except BaseException:
        if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
            await conn.execute("ROLLBACK")
        raise


class AsyncDatabase:
    """A pool of async connections to one database. Built anywhere, opened
    (``open()``) and closed (``close()``) on the event loop that uses it."""

    def __init__(
        self, url: str, *, pool_size: int, pool_timeout: float, prepare_threshold: int | None
    ) -> None:
        """`prepare_threshold` as the process's sync pool has it
        (``Database.prepare_threshold``: None behind a PgBouncer that cannot
        keep prepared statements)."""
        sqlalchemy_url(url)  # validated as the sync pool validates it
        self._returned_at: dict[int, float] = {}
        self.pool: AsyncConnectionPool[AsyncConn] = AsyncConnectionPool(
            libpq_url(url),
            min_size=1,
            max_size=pool_size,
            timeout=pool_timeout,
            kwargs=connection_kwargs(prepare_threshold),
            connection_class=AsyncConn,
            check=self._check_if_idle,
            open=False,
        )

    # As Database._check_if_idle: only a connection that sat idle costs a ping.
    _IDLE_CHECK_SECONDS = IDLE_CHECK_SECONDS

    async def _check_if_idle(self, conn: AsyncConn) -> None:
        returned = self._returned_at.get(id(conn))
        if returned is None or time.monotonic() - returned > self._IDLE_CHECK_SECONDS:
            await AsyncConnectionPool.check_connection(conn)

    async def open(self) -> None:
        """Start the pool without waiting for its first connection: a web
        process started before its database answers 503 until it is up."""
        await self.pool.open(wait=False)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConn]:
        """A pooled autocommit connection; ``psycopg_pool.PoolTimeout`` (an
        ``OperationalError``) past the pool's timeout."""
        async with self.pool.connection() as conn:
            try:
                yield conn
            finally:
                self._returned_at[id(conn)] = time.monotonic()

    async def close(self) -> None:
        await self.pool.close()
