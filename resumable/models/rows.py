"""Running a named statement and mapping what it answers: the one way the
typed functions beside the statements (``*_queries.py``) read rows. A row
becomes a dataclass (a whole table row's is in ``records.py``) or one
value, whatever row factory the connection was opened with (the pool's are
dicts, a worker heartbeat's tuples); no caller picks a row factory itself."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.rows import kwargs_row, scalar_row, tuple_row

from resumable.priorities import Routed

Row = TypeVar("Row")
Params = Mapping[str, Any] | Sequence[Any] | None


def one(
    conn: psycopg.Connection[Any],
    row: Callable[..., Row],
    query: str,
    params: Params = None,
    *,
    prepare: bool | None = None,
) -> Row | None:
    """The statement's first row as `row(**columns)`; None if it answered none."""
    cursor = conn.cursor(row_factory=kwargs_row(row))
    return cursor.execute(query, params, prepare=prepare).fetchone()


def every(
    conn: psycopg.Connection[Any], row: Callable[..., Row], query: str, params: Params = None
) -> list[Row]:
    """Each of the statement's rows as `row(**columns)`."""
    return conn.cursor(row_factory=kwargs_row(row)).execute(query, params).fetchall()


def value(conn: psycopg.Connection[Any], query: str, params: Params = None) -> Any:
    """The first column of the statement's first row; None if it answered
    none (or that column is NULL: ask ``one`` when the two differ)."""
    return conn.cursor(row_factory=scalar_row).execute(query, params).fetchone()


def values(conn: psycopg.Connection[Any], query: str, params: Params = None) -> list[Any]:
    """The first column of each of the statement's rows."""
    return conn.cursor(row_factory=scalar_row).execute(query, params).fetchall()


def routes(conn: psycopg.Connection[Any], query: str, params: Params = None) -> list[Routed]:
    """Each row's session id and priority (its first two columns): sessions
    to send, each on its priority's lane."""
    found = conn.cursor(row_factory=tuple_row).execute(query, params).fetchall()
    return [Routed(uuid.UUID(str(row[0])), row[1]) for row in found]


def found(conn: psycopg.Connection[Any], query: str, params: Params = None) -> bool:
    """Whether the statement answered a row (a fenced write: whether it wrote)."""
    return conn.cursor(row_factory=tuple_row).execute(query, params).fetchone() is not None


def run(conn: psycopg.Connection[Any], query: str, params: Params = None) -> None:
    """Run a statement whose rows, if any, nobody reads."""
    conn.execute(query, params)
