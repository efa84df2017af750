"""The reads behind the console's pages that ``Client`` does not offer:
sessions by id prefix and age, a session's tool calls, callbacks and dead
letters, the agents workers announced. Each runs a named statement's typed
function (``resumable/models``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from resumable.client import decode_cursor, encode_cursor
from resumable.models import (
    agent_queries,
    dead_letter_queries,
    event_queries,
    tool_call_queries,
    wait_ops,
)
from resumable.models import session_queries as sessions
from resumable.models.database import Database
from resumable.models.records import (
    AuditEventRecord,
    CallbackRecord,
    DeadLetterRecord,
    ToolCallRecord,
)
from resumable.models.session_queries import SessionSummary

__all__ = [
    "MAX_TOOL_CALLS",
    "SessionFilter",
    "SessionSummary",
    "callbacks",
    "dead_letters_of",
    "find_sessions",
    "known_agents",
    "letters_by_id",
    "session_events",
    "tool_calls",
]

# The most rows a session page lists of each kind (the API pages through the rest).
MAX_TOOL_CALLS = 200


def session_events(
    db: Database, session_id: uuid.UUID, *, after: int, limit: int
) -> list[AuditEventRecord]:
    """A page of the audit log as rows (the templates read the table's names)."""
    with db.connection() as conn:
        return event_queries.events(conn, session_id, after=after, limit=limit)


@dataclass(frozen=True)
class SessionFilter:
    status: str | None = None
    agent: str | None = None
    # The start of the session id, as typed (lower-case hex and dashes).
    id_prefix: str | None = None
    # Created at least / at most this long ago.
    older_than: timedelta | None = None
    newer_than: timedelta | None = None
    # Text the error's type or message contains.
    error: str | None = None
    # The value at a path of the input, state or result.
    document: str | None = None
    path: list[str] | None = None
    value: str | None = None


def find_sessions(
    db: Database, where: SessionFilter, *, limit: int, cursor: str | None
) -> tuple[list[SessionSummary], str | None]:
    """Newest first, keyset-paginated with the API's cursors."""
    now = datetime.now(UTC)
    before = decode_cursor(cursor) if cursor else None
    with db.connection() as conn:
        rows = sessions.summaries(
            conn,
            limit=limit + 1,
            status=where.status,
            agent=where.agent,
            id_prefix=where.id_prefix,
            created_before=None if where.older_than is None else now - where.older_than,
            created_after=None if where.newer_than is None else now - where.newer_than,
            error=where.error,
            document=where.document,
            path=where.path,
            value=where.value,
            before=before,
        )
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    return rows[:limit], encode_cursor(last.created_at, last.id)


def tool_calls(db: Database, session_id: uuid.UUID) -> list[ToolCallRecord]:
    with db.connection() as conn:
        return tool_call_queries.of_session(conn, session_id, limit=MAX_TOOL_CALLS)


def callbacks(db: Database, tokens: list[str]) -> dict[str, CallbackRecord]:
    if not tokens:
        return {}
    with db.connection() as conn:
        return {row.token: row for row in wait_ops.callbacks_by_token(conn, tokens)}


def dead_letters_of(db: Database, session_id: uuid.UUID) -> list[DeadLetterRecord]:
    """The session's dead letters, newest first (a retried session may fail again)."""
    with db.connection() as conn:
        return dead_letter_queries.of_session(conn, session_id, limit=20)


def known_agents(db: Database) -> list[str]:
    with db.connection() as conn:
        return agent_queries.agent_names(conn)


def letters_by_id(db: Database, ids: list[int]) -> list[DeadLetterRecord]:
    """These dead letters, in the order given (without their tracebacks' weight mattering)."""
    if not ids:
        return []
    with db.connection() as conn:
        return dead_letter_queries.by_id(conn, ids)
