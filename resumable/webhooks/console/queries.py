"""The reads behind the console's pages that ``Client`` does not offer:
sessions by id prefix and age, a session's tool calls, callbacks and dead
letters, the agents workers announced."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from resumable.client import decode_cursor, encode_cursor
from resumable.models.database import Database
from resumable.models.tables import (
    AgentInfoRow,
    AuditEventRow,
    CallbackRow,
    DeadLetterRow,
    SessionRow,
    ToolCallRow,
)

# The most rows a session page lists of each kind (the API pages through the rest).
MAX_TOOL_CALLS = 200


def session_events(
    db: Database, session_id: uuid.UUID, *, after: int, limit: int
) -> list[AuditEventRow]:
    """A page of the audit log as rows (the templates read the table's names)."""
    query = (
        select(AuditEventRow)
        .where(AuditEventRow.session_id == session_id)
        .where(col(AuditEventRow.id) > after)
        .order_by(col(AuditEventRow.id))
        .limit(limit)
    )
    with Session(db.engine, expire_on_commit=False) as session:
        return list(session.exec(query).all())


@dataclass(frozen=True)
class SessionFilter:
    status: str | None = None
    agent: str | None = None
    # The start of the session id, as typed (lower-case hex and dashes).
    id_prefix: str | None = None
    # Created at least / at most this long ago.
    older_than: timedelta | None = None
    newer_than: timedelta | None = None


@dataclass(frozen=True)
class SessionSummary:
    """A row of the sessions list (the state stays in the database)."""

    id: uuid.UUID
    agent: str
    status: str
    cursor: str | None
    step_seq: int
    attempts: int
    created_at: datetime
    updated_at: datetime
    error: dict[str, Any] | None


def find_sessions(
    db: Database, where: SessionFilter, *, limit: int, cursor: str | None
) -> tuple[list[SessionSummary], str | None]:
    """Newest first, keyset-paginated with the API's cursors."""
    columns = [
        col(SessionRow.id),
        col(SessionRow.agent),
        col(SessionRow.status),
        col(SessionRow.cursor),
        col(SessionRow.step_seq),
        col(SessionRow.attempts),
        col(SessionRow.created_at),
        # SessionRow.changed_at, in SQL.
        sa.func.greatest(col(SessionRow.updated_at), col(SessionRow.step_started_at)).label(
            "updated_at"
        ),
        col(SessionRow.error),
    ]
    query = sa.select(*columns).order_by(
        col(SessionRow.created_at).desc(), col(SessionRow.id).desc()
    )
    now = datetime.now(UTC)
    if where.status:
        query = query.where(col(SessionRow.status) == where.status)
    if where.agent:
        query = query.where(col(SessionRow.agent) == where.agent)
    if where.id_prefix:
        query = query.where(sa.cast(col(SessionRow.id), sa.Text).startswith(where.id_prefix))
    if where.older_than is not None:
        query = query.where(col(SessionRow.created_at) <= now - where.older_than)
    if where.newer_than is not None:
        query = query.where(col(SessionRow.created_at) >= now - where.newer_than)
    if cursor:
        created_at, last_id = decode_cursor(cursor)
        query = query.where(
            sa.tuple_(col(SessionRow.created_at), col(SessionRow.id)) < (created_at, last_id)
        )
    with db.engine.connect() as conn:
        found = conn.execute(query.limit(limit + 1)).all()
    rows = [SessionSummary(**row._mapping) for row in found]
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    return rows[:limit], encode_cursor(last.created_at, last.id)


def tool_calls(db: Database, session_id: uuid.UUID) -> list[ToolCallRow]:
    query = (
        select(ToolCallRow)
        .where(ToolCallRow.session_id == session_id)
        .order_by(col(ToolCallRow.step_seq), col(ToolCallRow.call_index))
        .limit(MAX_TOOL_CALLS)
    )
    with Session(db.engine, expire_on_commit=False) as session:
        return list(session.exec(query).all())


def callbacks(db: Database, tokens: list[str]) -> dict[str, CallbackRow]:
    if not tokens:
        return {}
    query = select(CallbackRow).where(col(CallbackRow.token).in_(tokens))
    with Session(db.engine, expire_on_commit=False) as session:
        return {row.token: row for row in session.exec(query).all()}


def dead_letters_of(db: Database, session_id: uuid.UUID) -> list[DeadLetterRow]:
    """The session's dead letters, newest first (a retried session may fail again)."""
    query = (
        select(DeadLetterRow)
        .where(DeadLetterRow.session_id == session_id)
        .order_by(col(DeadLetterRow.id).desc())
        .limit(20)
    )
    with Session(db.engine, expire_on_commit=False) as session:
        return list(session.exec(query).all())


def known_agents(db: Database) -> list[str]:
    with Session(db.engine) as session:
        return sorted(session.exec(select(AgentInfoRow.name)).all())


def letters_by_id(db: Database, ids: list[int]) -> list[DeadLetterRow]:
    """These dead letters, in the order given (without their tracebacks' weight mattering)."""
    if not ids:
        return []
    query = select(DeadLetterRow).where(col(DeadLetterRow.id).in_(ids))
    with Session(db.engine, expire_on_commit=False) as session:
        found = {row.id: row for row in session.exec(query).all()}
    return [found[i] for i in ids if i in found]
