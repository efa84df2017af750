"""Running a named statement and mapping what it answers: the one way the
typed functions beside the statements (``*_queries.py``) read rows. A row
becomes a frozen dataclass, a table's row class (``table_row``) or one
value, whatever row factory the connection was opened with (the pool's are
dicts, a worker heartbeat's tuples); no caller picks a row factory itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.rows import kwargs_row, scalar_row, tuple_row

Row = TypeVar("Row")
Params = Mapping[str, Any] | Sequence[Any] | None


def table_row(table: type[Row]) -> Callable[..., Row]:
    """Build rows of a table's class (``tables.py``) from their columns as
    SQLAlchemy's loader does: the instance with its ORM state, the columns
    set, and not the class's ``__init__``, whose work (meant for new rows)
    costs twenty times as much: a page of 50 sessions took 4 ms more.

    SQLAlchemy is imported here, not at the top: only the reads that return
    whole table rows need it, and a worker, which never does, starts without
    loading the ORM (a fifth of a second of CPU per process)."""
    from sqlalchemy.orm import configure_mappers
    from sqlalchemy.orm.instrumentation import manager_of_class

    manager = manager_of_class(table)

    def build(**columns: Any) -> Row:
        if not manager.mapper.configured:  # as the first ORM use would (10 ms, once)
            configure_mappers()
        row: Row = manager.new_instance()
        row.__dict__.update(columns)
        return row

    return build


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


def found(conn: psycopg.Connection[Any], query: str, params: Params = None) -> bool:
    """Whether the statement answered a row (a fenced write: whether it wrote)."""
    return conn.cursor(row_factory=tuple_row).execute(query, params).fetchone() is not None


def run(conn: psycopg.Connection[Any], query: str, params: Params = None) -> None:
    """Run a statement whose rows, if any, nobody reads."""
    conn.execute(query, params)
