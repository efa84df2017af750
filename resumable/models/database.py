"""Connections to PostgreSQL: a psycopg pool for the named statements (every
read and write; the typed functions beside them take its connections), built
once per process in an entry point and handed down. The migrations open their
own SQLAlchemy connection (``migrate.py``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from resumable._internal.database_urls import libpq_url, sqlalchemy_url
from resumable._internal.interrupt_shield import shielded


@contextmanager
def pipelined_transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A transaction on an autocommit connection in pipeline mode, whose
    BEGIN goes out with the block's first statements and whose COMMIT with
    the final sync. psycopg's ``conn.transaction()`` sends its BEGIN and waits
    for the answer even in pipeline mode (and its pipeline syncs once more
    after the COMMIT): two round trips more than the transaction needs. In
    the block, a statement's rows can be read as usual (the pipeline is
    flushed, not synced), and the transaction stays open until the block
    ends. An exception rolls it back."""
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            yield
            conn.execute("COMMIT")
    except BaseException:
        if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
        raise


# A server that does not answer (a host gone from the network) would otherwise
# hold a connection attempt for the operating system's TCP timeout, minutes.
CONNECT_TIMEOUT_SECONDS = 5
# psycopg's own default: a statement is prepared on its fifth run.
PREPARE_THRESHOLD = 5


def connection_kwargs(prepare_threshold: int | None) -> dict[str, Any]:
    """What every pooled connection is opened with, sync or async."""
    return {
        "autocommit": True,
        "row_factory": dict_row,
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        # psycopg prepares a statement on its fifth run on a connection
        # (the claim and the step commit on their first); None: never,
        # not even those (RESUMABLE_DB_PREPARED_STATEMENTS, a pooler
        # that hands each transaction another server connection).
        "prepare_threshold": prepare_threshold,
    }


#: How long a pooled connection may sit idle before it is checked on its next
#: borrow (see ``Database._check_if_idle``).
IDLE_CHECK_SECONDS = 2.0


class Database:
    """A pool of connections to one database; close() releases them.

    `pool_timeout` is how long a caller waits for a connection before
    ``psycopg_pool.PoolTimeout`` (an ``OperationalError``): the 30 s default
    suits workers riding out a restart; the web process passes a short one so
    that, with the database down, a request fails fast (503) instead of
    hanging.
    """

    def __init__(
        self,
        url: str,
        pool_size: int = 10,
        pool_timeout: float = 30.0,
        *,
        prepared_statements: bool = True,
    ) -> None:
        self.url = sqlalchemy_url(url)  # validated: a PostgreSQL URL, as the migrations read it
        #: psycopg's prepare_threshold for this database's connections (None:
        #: nothing is prepared), for a connection of its own made beside the pool.
        self.prepare_threshold: int | None = PREPARE_THRESHOLD if prepared_statements else None
        self._returned_at: dict[int, float] = {}
        self._pinned = threading.local()
        self.pool: ConnectionPool[psycopg.Connection[dict[str, object]]] = ConnectionPool(
            libpq_url(url),
            min_size=1,
            max_size=pool_size,
            timeout=pool_timeout,
            kwargs=connection_kwargs(self.prepare_threshold),
            connection_class=psycopg.Connection[dict[str, object]],
            check=self._check_if_idle,
            # No `reset=`: with one, psycopg_pool hands every returned
            # connection to its maintenance thread (a queue hop and a thread
            # switch per statement, measured at -11% CPU per step without it).
            # The return time `check` needs is noted in `connection()` instead.
            open=True,
        )

    # After a server restart, pooled connections are dead and the first query on
    # each would fail. Pinging on every borrow costs a round trip per step, so
    # only connections that sat idle in the pool get checked; one in steady use
    # proves itself with every statement (and a broken one is discarded).
    _IDLE_CHECK_SECONDS = IDLE_CHECK_SECONDS

    def _check_if_idle(self, conn: psycopg.Connection[Any]) -> None:
        returned = self._returned_at.get(id(conn))
        if returned is None or time.monotonic() - returned > self._IDLE_CHECK_SECONDS:
            ConnectionPool.check_connection(conn)

    @contextmanager
    def connection(
        self, timeout: float | None = None
    ) -> Iterator[psycopg.Connection[dict[str, object]]]:
        """A pooled autocommit connection: one statement is one transaction.
        `timeout` overrides the pool's wait for this call (a readiness probe).

        Inside ``pinned()`` on this thread, the pinned connection, unless it is
        already in use further up this thread's stack (a nested call gets its
        own from the pool, as it always did)."""
        # A step's time limit must not land in the pool's wait or return,
        # nor half-way through the statements (see ``interrupt_shield``).
        with shielded():
            yield from self._connection(timeout)

    def _connection(self, timeout: float | None) -> Iterator[psycopg.Connection[dict[str, object]]]:
        pin: _Pin | None = getattr(self._pinned, "pin", None)
        if pin is not None and not pin.in_use:
            if pin.conn is None:
                pin.conn = self.pool.getconn(timeout)
            conn = pin.conn
            pin.in_use = True
            try:
                yield conn
            finally:
                pin.in_use = False
                if conn.broken or conn.info.transaction_status != TransactionStatus.IDLE:
                    pin.conn = None  # the pool discards it (or rolls it back)
                    self._give_back(conn)
            return
        with self.pool.connection(timeout=timeout) as conn:
            try:
                yield conn
            finally:
                # Noted before the pool takes it back, for `_check_if_idle`.
                self._returned_at[id(conn)] = time.monotonic()

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Keep one pooled connection on this thread for the block (a worker's
        run of a session: tens of steps), so each statement in it does not pay
        a pool checkout and return (a lock, a deque, the idle check, the
        context managers: about 8% of a worker's CPU per step).

        Nothing is held open between statements (autocommit, as every
        ``connection()``). A connection that breaks, or is left in a
        transaction, goes back to the pool (which discards or rolls it back)
        and the next statement takes another, as outside the block."""
        if getattr(self._pinned, "pin", None) is not None:
            yield  # already pinned further up this thread
            return
        pin = _Pin()  # a connection is taken at the first statement
        self._pinned.pin = pin
        try:
            yield
        finally:
            self._pinned.pin = None
            if pin.conn is not None:
                with shielded():
                    self._give_back(pin.conn)

    def _give_back(self, conn: psycopg.Connection[dict[str, object]]) -> None:
        self._returned_at[id(conn)] = time.monotonic()
        self.pool.putconn(conn)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Pin:
    """The connection ``Database.pinned`` keeps on a thread."""

    __slots__ = ("conn", "in_use")

    def __init__(self) -> None:
        self.conn: psycopg.Connection[dict[str, object]] | None = None
        self.in_use = False
