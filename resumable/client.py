"""Starting and inspecting sessions from Python.

``start`` commits the session row before it sends the queue message, so a
message lost in between (Redis down or flushed) leaves a pending session that
the reconciler re-enqueues; it never leaves a message without a session.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import dramatiq
import psycopg
import sqlalchemy as sa
from psycopg.rows import class_row
from sqlmodel import Session, col, select

from resumable import serialization
from resumable.agent import AgentRegistry
from resumable.errors import (
    IdempotencyConflictError,
    InvalidCursorError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStateError,
)
from resumable.models import agent_queries, session_queries, step_queries
from resumable.models.agent_queries import UnservedAgent
from resumable.models.database import Database
from resumable.models.status import SessionStatus
from resumable.models.step_queries import HungSession
from resumable.models.tables import AuditEventRow, CheckpointRow, SessionRow, WorkerRow
from resumable.queue.broker import enqueue_session
from resumable.settings import Settings

logger = logging.getLogger(__name__)

#: A running step is hung after this long even without a time limit of its own.
HUNG_AFTER_SECONDS = 600.0

# Statuses in which a session needs a worker that loads its agent.
_WAITING_FOR_A_WORKER = (
    SessionStatus.PENDING,
    SessionStatus.RETRYING,
    SessionStatus.RUNNING,
    SessionStatus.COMPENSATING,
)


@dataclass(frozen=True)
class Started:
    """The session a `start` call refers to, and whether this call created it."""

    session_id: uuid.UUID
    created: bool


class Client:
    """Enqueue and inspect sessions. `registry`, when given, validates agent names
    before anything is written."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        broker: dramatiq.Broker,
        registry: AgentRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.broker = broker
        self.registry = registry

    def start(
        self,
        agent: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        session_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        """Create a session and enqueue it; return its id. The same idempotency
        key returns the same session (and a different request under it is an error)."""
        return self.start_session(
            agent, input, idempotency_key=idempotency_key, session_id=session_id
        ).session_id

    def start_session(
        self,
        agent: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        session_id: uuid.UUID | None = None,
    ) -> Started:
        cursor = None
        if self.registry is not None:
            cursor = self.registry.get(agent).start_step  # raises UnknownAgentError
        encoded_input = serialization.dumps(input, "input")
        new_id = session_id or uuid.uuid4()
        with self.db.connection() as conn:
            try:
                row = conn.execute(
                    session_queries.CREATE_SESSION,
                    {
                        "id": new_id,
                        "agent": agent,
                        "cursor": cursor,
                        "input": encoded_input,
                        "idempotency_key": idempotency_key,
                    },
                ).fetchone()
            except psycopg.errors.UniqueViolation:
                raise SessionExistsError(f"a session with id {new_id} already exists") from None
            if row is None:
                existing = conn.execute(
                    session_queries.FIND_BY_IDEMPOTENCY_KEY, {"idempotency_key": idempotency_key}
                ).fetchone()
                if existing is None:  # pragma: no cover - the key's row cannot vanish
                    raise IdempotencyConflictError("idempotency key conflict; try again")
                same = existing["agent"] == agent and serialization.canonical(
                    existing["input"]
                ) == serialization.canonical(input)
                if not same:
                    raise IdempotencyConflictError(
                        f"idempotency key {idempotency_key!r} was used for a different request"
                    )
                return Started(uuid.UUID(str(existing["id"])), created=False)
        try:
            enqueue_session(self.broker, self.settings, new_id)
        except Exception:
            # The row is committed: the reconciler will enqueue it later.
            logger.warning(
                "session %s committed but not enqueued; the reconciler will pick it up",
                new_id,
                exc_info=True,
                extra={"action": "enqueue_failed", "session_id": str(new_id)},
            )
        return Started(new_id, created=True)

    def cancel(self, session_id: uuid.UUID | str, *, actor: str, reason: str | None) -> None:
        """Cancel a session that has not finished. Fences out a running worker
        (the epoch moves on) and closes its callbacks."""
        sid = _as_uuid(session_id)
        with self.db.connection() as conn:
            row = conn.execute(
                session_queries.CANCEL_SESSION, {"id": sid, "actor": actor, "reason": reason}
            ).fetchone()
        if row is None:
            status = self.get(sid).status  # raises SessionNotFoundError
            raise SessionStateError(f"session {sid} is already {status}")

    def page_sessions(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        hung_after: float | None = None,
        unserved: bool = False,
    ) -> tuple[list[SessionRow], str | None]:
        """Newest first, keyset-paginated: the page and the cursor of the next one.
        `hung_after` (seconds) keeps only hung sessions: running, with a current
        step past its time limit or running longer than that. `unserved` keeps
        only sessions waiting for a worker that loads their agent (none is alive)."""
        query = select(SessionRow).order_by(
            col(SessionRow.created_at).desc(), col(SessionRow.id).desc()
        )
        if status:
            query = query.where(SessionRow.status == status)
        if agent:
            query = query.where(SessionRow.agent == agent)
        if hung_after is not None:
            now = sa.func.now()
            query = query.where(
                SessionRow.status == SessionStatus.RUNNING,
                sa.or_(
                    col(SessionRow.step_deadline) < now,
                    col(SessionRow.step_started_at) < now - timedelta(seconds=hung_after),
                ),
            )
        if unserved:
            served = sa.exists().where(
                col(WorkerRow.expires_at) > sa.func.now(),
                col(WorkerRow.agents).op("?")(SessionRow.agent),
            )
            query = query.where(col(SessionRow.status).in_(_WAITING_FOR_A_WORKER), ~served)
        if cursor:
            created_at, last_id = decode_cursor(cursor)
            query = query.where(
                sa.tuple_(col(SessionRow.created_at), col(SessionRow.id)) < (created_at, last_id)
            )
        with Session(self.db.engine, expire_on_commit=False) as db:
            rows = list(db.exec(query.limit(limit + 1)).all())
        if len(rows) <= limit:
            return rows, None
        last = rows[limit - 1]
        return rows[:limit], encode_cursor(last.created_at, last.id)

    def get(self, session_id: uuid.UUID | str) -> SessionRow:
        with Session(self.db.engine, expire_on_commit=False) as db:
            row = db.get(SessionRow, _as_uuid(session_id))
        if row is None:
            raise SessionNotFoundError(f"no session {session_id}")
        return row

    def list_sessions(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 50,
        hung_after: float | None = None,
        unserved: bool = False,
    ) -> list[SessionRow]:
        """The newest sessions (the first page of `page_sessions`)."""
        page, _ = self.page_sessions(
            status=status, agent=agent, limit=limit, hung_after=hung_after, unserved=unserved
        )
        return page

    def unserved_agents(self) -> list[UnservedAgent]:
        """Agents with sessions waiting because no live worker loads them."""
        return unserved_agents(self.db)

    def hung_sessions(
        self, *, after_seconds: float = HUNG_AFTER_SECONDS, limit: int = 100
    ) -> list[HungSession]:
        """Running sessions whose current step has run past its time limit or
        longer than `after_seconds`, longest-running first."""
        return hung_sessions(self.db, after_seconds=after_seconds, limit=limit)

    def events(
        self, session_id: uuid.UUID | str, *, after: int = 0, limit: int | None = None
    ) -> list[AuditEventRow]:
        query = (
            select(AuditEventRow)
            .where(AuditEventRow.session_id == _as_uuid(session_id))
            .where(col(AuditEventRow.id) > after)
            .order_by(col(AuditEventRow.id))
        )
        if limit is not None:
            query = query.limit(limit)
        with Session(self.db.engine, expire_on_commit=False) as db:
            return list(db.exec(query).all())

    def checkpoints(self, session_id: uuid.UUID | str) -> list[CheckpointRow]:
        query = (
            select(CheckpointRow)
            .where(CheckpointRow.session_id == _as_uuid(session_id))
            .order_by(col(CheckpointRow.seq))
        )
        with Session(self.db.engine, expire_on_commit=False) as db:
            return list(db.exec(query).all())

    def count_by_status(self) -> dict[str, int]:
        with Session(self.db.engine) as db:
            rows = db.exec(
                select(SessionRow.status, sa.func.count()).group_by(SessionRow.status)
            ).all()
        return {status: int(count) for status, count in rows}


def hung_sessions(
    db: Database, *, after_seconds: float = HUNG_AFTER_SECONDS, limit: int = 100
) -> list[HungSession]:
    """Running sessions whose current step has run past its time limit or longer
    than `after_seconds`, longest-running first (for metrics, the CLI and alerts).

    A time limit interrupts a step busy in Python; one blocked in C code or on
    a socket without a timeout keeps its session until it returns, and this is
    where it shows. Cancelling such a session fences its writes out; its
    worker thread stays blocked until the call returns."""
    with db.connection() as conn:
        return (
            conn.cursor(row_factory=class_row(HungSession))
            .execute(step_queries.HUNG_SESSIONS, {"after": after_seconds, "limit": limit})
            .fetchall()
        )


def unserved_agents(db: Database) -> list[UnservedAgent]:
    """Agents with sessions waiting because no live worker loads them, and how
    many (for metrics and alerts). Such sessions are not claimed or touched;
    the first worker that loads the agent enqueues them when it starts."""
    with db.connection() as conn:
        return (
            conn.cursor(row_factory=class_row(UnservedAgent))
            .execute(agent_queries.UNSERVED_SESSIONS_BY_AGENT)
            .fetchall()
        )


def encode_cursor(created_at: datetime, session_id: uuid.UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(session_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, session_id = json.loads(raw)
        return datetime.fromisoformat(created_at), uuid.UUID(session_id)
    except (ValueError, TypeError) as exc:
        raise InvalidCursorError(f"invalid cursor {cursor[:40]!r}") from exc


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except ValueError:
        raise SessionNotFoundError(f"{value!r} is not a session id") from None
