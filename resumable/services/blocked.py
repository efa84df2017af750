"""The operator's way out of a ``blocked`` session: resume, accept, fail.

A session is blocked when replay diverged from its record (see
``resumable/queue/parking.py``). Shared by the command line and the HTTP API;
each action is an audit event on the session with who and why, and an action
on a session that is not blocked is refused and changes nothing.

- **resume**: after deploying code that matches the record again; the session
  runs its step again (and is blocked again if it still diverges).
- **accept**: the new behaviour is right; the recorded calls of the diverged
  step from the divergence point on are superseded (kept and audited, no longer
  replayed), and the step runs with the calls it now makes (also when it now
  makes fewer calls than recorded: ``tool_calls_missing``).
- **fail**: the session fails as after a permanent error: its saga runs (only
  now), then it is dead-lettered.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Literal

import dramatiq
import psycopg

from resumable.broker.messages import enqueue_after_commit
from resumable.errors import SessionNotFoundError, SessionStateError
from resumable.models import blocked_queries
from resumable.models.database import Database
from resumable.settings import Settings

logger = logging.getLogger(__name__)

Action = Literal["resume", "accept", "fail"]


@dataclass(frozen=True)
class BlockedOutcome:
    """What an operator's action did."""

    session_id: uuid.UUID
    action: Action
    status: str
    blocked: dict[str, Any]
    superseded: list[dict[str, Any]]


class BlockedSessions:
    def __init__(self, settings: Settings, db: Database, broker: dramatiq.Broker) -> None:
        self.settings = settings
        self.db = db
        self.broker = broker

    def reason(self, session_id: uuid.UUID) -> dict[str, Any]:
        """Why the session is blocked; refused when it is not."""
        with self.db.connection() as conn:
            row = blocked_queries.blocked_reason(conn, session_id)
        if row is None:
            raise SessionNotFoundError(f"no session {session_id}")
        if row.status != "blocked":
            raise SessionStateError(f"session {session_id} is {row.status}, not blocked")
        return row.blocked_reason or {}

    def resume(self, session_id: uuid.UUID, *, actor: str, reason: str | None) -> BlockedOutcome:
        blocked = self.reason(session_id)
        return self._reopen(session_id, "resume", "blocked_resumed", blocked, [], actor, reason)

    def accept(self, session_id: uuid.UUID, *, actor: str, reason: str | None) -> BlockedOutcome:
        blocked = self.reason(session_id)
        if blocked.get("kind") not in ("tool_call_diverged", "tool_calls_missing"):
            raise SessionStateError(
                f"session {session_id} is blocked by a {blocked.get('kind', 'divergence')}: "
                "there is no new behaviour to accept; deploy the code it needs and resume "
                "it, or fail it"
            )
        with self.db.connection() as conn, conn.transaction():
            calls = blocked_queries.supersede_calls(
                conn,
                session_id,
                actor=actor,
                step_seq=blocked["step_seq"],
                call_index=blocked["call_index"],
            )
            superseded = [asdict(call) for call in calls]
            outcome = self._reopen(
                session_id, "accept", "divergence_accepted", blocked, superseded, actor, reason,
                conn=conn,
            )  # fmt: skip
        self._enqueue(session_id)
        return outcome

    def fail(self, session_id: uuid.UUID, *, actor: str, reason: str | None) -> BlockedOutcome:
        blocked = self.reason(session_id)
        error = {
            "code": "replay_diverged",
            "type": "ReplayDivergedError",
            "message": f"failed by {actor} while blocked: {blocked.get('message', '')}"
            + (f" ({reason})" if reason else ""),
            "step": blocked.get("step"),
            "blocked": blocked,
        }
        with self.db.connection() as conn:
            status = blocked_queries.fail(
                conn, session_id, actor=actor, reason=reason, blocked=blocked, error=error
            )
        if status is None:
            raise SessionStateError(f"session {session_id} is no longer blocked")
        self._enqueue(session_id)
        return BlockedOutcome(session_id, "fail", status, blocked, [])

    def _reopen(
        self,
        session_id: uuid.UUID,
        action: Action,
        event: str,
        blocked: dict[str, Any],
        superseded: list[dict[str, Any]],
        actor: str,
        reason: str | None,
        conn: psycopg.Connection[Any] | None = None,
    ) -> BlockedOutcome:
        def resume(on: psycopg.Connection[Any]) -> str | None:
            return blocked_queries.resume(
                on,
                session_id,
                event=event,
                actor=actor,
                reason=reason,
                blocked=blocked,
                superseded=superseded,
            )

        if conn is None:
            with self.db.connection() as own:
                status = resume(own)
        else:
            status = resume(conn)
        if status is None:
            raise SessionStateError(f"session {session_id} is no longer blocked")
        if conn is None:
            self._enqueue(session_id)
        return BlockedOutcome(session_id, action, status, blocked, superseded)

    def _enqueue(self, session_id: uuid.UUID) -> None:
        enqueue_after_commit(
            self.broker, self.settings, [session_id], why="blocked session released"
        )
