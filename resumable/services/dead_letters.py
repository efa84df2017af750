"""The operator's dead-letter queue: list, show, retry, discard, drain.

Shared by the command line and the HTTP API. Every action is an audit event
on the session with who, when and why; an action on a dead letter that is no
longer open is an error and changes nothing. A dry run applies the same rules
as the real run (``refusal``), so it says which would be refused and why.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from resumable._internal import serialization
from resumable.broker.messages import BrokerSource, broker_of, enqueue_after_commit
from resumable.errors import (
    DeadLetterNotFoundError,
    DeadLetterStateError,
    InvalidDrainError,
    InvalidPatchError,
    ResumableError,
)
from resumable.models import dead_letter_queries, event_queries, session_queries
from resumable.models.database import Database
from resumable.models.dead_letter_queries import DeadLetterGroup
from resumable.models.records import DeadLetterRecord
from resumable.services.state_patch import apply_state_patch
from resumable.settings import Settings

if TYPE_CHECKING:
    pass

Action = Literal["retry", "discard"]
Compensation = Literal["none", "completed", "failed"]
COMPENSATIONS: tuple[Compensation, ...] = ("none", "completed", "failed")

# Bounds of a drain's rate (actions per second); the CLI and the API share them.
MIN_RATE = 0.01
MAX_RATE = 10_000.0


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters an operator means."""

    status: str | None = "open"
    agent: str | None = None
    error_type: str | None = None
    step: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    # The saga's outcome: "none" (no compensation ran), "completed" or "failed".
    compensation: str | None = None
    # These dead letters only (an operator's selection), when given.
    ids: tuple[int, ...] | None = None


def _statement_filters(where: DeadLetterFilter) -> dict[str, Any]:
    """`where` as the dead-letter statements' filter parameters."""
    fields = dict(where.__dict__)
    fields["ids"] = list(where.ids) if where.ids is not None else None
    return fields


@dataclass
class DrainReport:
    """`matched`: every open dead letter the filter selected. A real run puts
    each in `done` or `failed` (with why); a dry run puts those the same rules
    would refuse in `refused` (with why) and leaves `done` and `failed` empty."""

    action: Action
    dry_run: bool
    matched: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)

    @property
    def would_act(self) -> list[int]:
        """In a dry run: the dead letters the real run would act on."""
        return [i for i in self.matched if i not in self.refused]

    def as_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "dry_run": self.dry_run,
            "matched": self.matched,
            "done": self.done,
            "failed": {str(k): v for k, v in self.failed.items()},
            "refused": {str(k): v for k, v in self.refused.items()},
        }


def refusal(action: Action, letter: DeadLetterRecord, session_status: str | None) -> str | None:
    """Why `action` on `letter` would be refused, or None if it would be done:
    the one rule book for real runs and dry runs."""
    if letter.status != "open":
        return f"dead letter {letter.id} is already {letter.status}"
    if action == "discard":
        return None
    if letter.compensation != "none":
        return (
            f"dead letter {letter.id}: its compensations ran ({letter.compensation}); the "
            "effects they undid would not be redone, so it cannot be retried; start a new "
            "session instead"
        )
    if session_status != "failed":
        return (
            f"dead letter {letter.id}: its session is {session_status or 'gone'}, not failed, "
            "so there is nothing to retry"
        )
    return None


class DeadLetters:
    def __init__(self, settings: Settings, db: Database, broker: BrokerSource) -> None:
        self.settings = settings
        self.db = db
        self.broker = broker

    def find(
        self, where: DeadLetterFilter, *, limit: int = 50, before_id: int | None = None
    ) -> tuple[list[DeadLetterRecord], int | None]:
        """Newest first; the id to pass as `before_id` for the next page, or None."""
        if where.compensation and where.compensation not in COMPENSATIONS:
            raise InvalidPatchError(
                f"unknown compensation outcome {where.compensation!r} ({', '.join(COMPENSATIONS)})"
            )
        with self.db.connection() as conn:
            rows = dead_letter_queries.find(
                conn, limit=limit + 1, before_id=before_id, **_statement_filters(where)
            )
        if len(rows) <= limit:
            return rows, None
        return rows[:limit], rows[limit - 1].id

    def groups(self, where: DeadLetterFilter, *, limit: int = 20) -> list[DeadLetterGroup]:
        """The dead letters `where` selects, grouped by agent, step and error
        type, largest first: what an operator retries or discards together."""
        with self.db.connection() as conn:
            return dead_letter_queries.groups(conn, limit=limit, **_statement_filters(where))

    def get(self, dead_letter_id: int) -> DeadLetterRecord:
        with self.db.connection() as conn:
            row = dead_letter_queries.get(conn, dead_letter_id)
        if row is None:
            raise DeadLetterNotFoundError(f"no dead letter {dead_letter_id}")
        return row

    def show(self, dead_letter_id: int, events: int = 20) -> dict[str, Any]:
        """The dead letter with its session's last state and last events."""
        letter = self.get(dead_letter_id)
        with self.db.connection() as conn:
            session = session_queries.get(conn, letter.session_id)
            recent = event_queries.latest_events(conn, letter.session_id, limit=events)
        assert session is not None
        return {
            "dead_letter": _as_json(letter),
            "session": {
                "status": session.status,
                "step": session.cursor,
                "seq": session.step_seq,
                "state": session.state,
                "input": session.input,
            },
            "events": [
                {
                    "id": e.id,
                    "type": e.event_type,
                    "step": e.step,
                    "payload": e.payload,
                    "at": e.created_at.isoformat(),
                }
                for e in recent
            ],
        }

    def retry(
        self,
        dead_letter_id: int,
        *,
        actor: str,
        reason: str | None = None,
        state_patch: list[dict[str, Any]] | None = None,
    ) -> uuid.UUID:
        """Resume the session from its latest checkpoint, attempts reset,
        optionally with the operator's RFC 6902 patch applied to its state."""
        letter = self.get(dead_letter_id)
        refused = refusal("retry", letter, self._session_statuses([letter]).get(letter.session_id))
        if refused:
            raise DeadLetterStateError(refused)
        patched = self._patched_state(letter.session_id, state_patch)
        with self.db.connection() as conn:
            retried = dead_letter_queries.retry(
                conn, dead_letter_id, actor=actor, reason=reason, state=patched, patch=state_patch
            )
        if retried is None:
            raise DeadLetterStateError(f"dead letter {dead_letter_id} is no longer open")
        enqueue_after_commit(
            broker_of(self.broker), self.settings, [retried], why="dead letter retried"
        )
        return uuid.UUID(str(retried.session_id))

    def _session_statuses(self, letters: list[DeadLetterRecord]) -> dict[uuid.UUID, str]:
        ids = list({letter.session_id for letter in letters})
        if not ids:
            return {}
        with self.db.connection() as conn:
            return session_queries.statuses(conn, ids)

    def _patched_state(
        self, session_id: uuid.UUID, state_patch: list[dict[str, Any]] | None
    ) -> str | None:
        if not state_patch:
            return None
        with self.db.connection() as conn:
            session = session_queries.get(conn, session_id)
        assert session is not None
        state = session.state
        result = apply_state_patch(state, state_patch)
        return serialization.dumps(result, "patched state")

    def discard(self, dead_letter_id: int, *, actor: str, reason: str) -> None:
        if not reason or not reason.strip():
            raise InvalidPatchError("a discard needs a reason")
        letter = self.get(dead_letter_id)
        refused = refusal("discard", letter, None)
        if refused:
            raise DeadLetterStateError(refused)
        with self.db.connection() as conn:
            discarded = dead_letter_queries.discard(
                conn, dead_letter_id, actor=actor, reason=reason
            )
        if not discarded:
            raise DeadLetterStateError(f"dead letter {dead_letter_id} is no longer open")

    def drain(
        self,
        action: Action,
        where: DeadLetterFilter,
        *,
        actor: str,
        reason: str | None = None,
        dry_run: bool = False,
        limit: int = 100,
        rate: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> DrainReport:
        """Retry or discard every open dead letter matching `where` (at most
        `limit`, at most `rate` per second). A dry run changes nothing and
        reports which the same rules would refuse, and why. Everything is
        validated before the first action."""
        if action not in ("retry", "discard"):
            raise InvalidDrainError(f"unknown drain action {action!r} (retry or discard)")
        if action == "discard" and not (reason and reason.strip()):
            raise InvalidDrainError("discarding needs a reason")
        if rate is not None and not MIN_RATE <= rate <= MAX_RATE:
            raise InvalidDrainError(f"rate must be between {MIN_RATE} and {MAX_RATE:g} per second")
        open_only = DeadLetterFilter(**{**where.__dict__, "status": "open"})
        rows, _ = self.find(open_only, limit=limit)
        report = DrainReport(action, dry_run, matched=[r.id for r in rows if r.id is not None])
        if dry_run:
            statuses = self._session_statuses(rows) if action == "retry" else {}
            for row in rows:
                refused = refusal(action, row, statuses.get(row.session_id))
                if refused and row.id is not None:
                    report.refused[row.id] = refused
            return report
        interval = 1.0 / rate if rate else 0.0
        for index, dead_letter_id in enumerate(report.matched):
            started = time.monotonic()
            try:
                if action == "retry":
                    self.retry(dead_letter_id, actor=actor, reason=reason)
                else:
                    self.discard(dead_letter_id, actor=actor, reason=reason or "")
                report.done.append(dead_letter_id)
            except ResumableError as exc:
                report.failed[dead_letter_id] = exc.message
            if progress:
                progress(index + 1, len(report.matched))
            pause = interval - (time.monotonic() - started)
            if pause > 0 and index + 1 < len(report.matched):
                time.sleep(pause)
        return report


def _as_json(letter: DeadLetterRecord) -> dict[str, Any]:
    """The row as JSON values, as the table class's ``model_dump(mode="json")``
    gave it (ISO times, ids as text)."""
    from pydantic import TypeAdapter

    dumped: dict[str, Any] = TypeAdapter(DeadLetterRecord).dump_python(letter, mode="json")
    return dumped
