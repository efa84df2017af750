"""What the API answers that is not a shared record (``resumable/schemas.py``):
the error body, delivery receipts, dead-letter details and reports, health."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import ConfigDict, Field

from resumable.models.status import SessionStatus
from resumable.schemas import AcceptPreview, DeadLetter, Event, JsonObject, Record, Session


class ErrorDetail(Record):
    code: str = Field(
        pattern=r"^[a-z_]+$",
        description="Stable and machine-readable, e.g. `session_not_found`; see each response.",
    )
    message: str = Field(description="For people; may change.")
    preview: AcceptPreview | None = Field(
        default=None,
        description="With `confirmation_required` only: what the accept would do (as "
        "`GET /v1/sessions/{session_id}/accept` answers).",
    )


class ErrorResponse(Record):
    """Every 4xx and 5xx answer; no stack trace ever leaves the server."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"error": {"code": "session_not_found", "message": "no session"}}]
        }
    )

    error: ErrorDetail


class Receipt(Record):
    """A callback or signal the server has committed (it will be consumed once)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "status": "accepted",
                    "message": "signal accepted",
                    "session_id": "3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
                    "delivery_id": 12,
                }
            ]
        }
    )

    status: Literal["accepted", "duplicate"] = Field(
        description="`accepted` (202): stored now; `duplicate` (200): the same delivery "
        "id and body came before, nothing new was stored."
    )
    message: str
    session_id: uuid.UUID
    delivery_id: int | None = Field(description="The stored delivery, when known.")


class DeadLetterDetail(Record):
    """A dead letter with its traceback, its session and the session's last events."""

    dead_letter: DeadLetter
    session: Session
    events: list[Event] = Field(description="The session's last 20 audit events, oldest first.")


class DrainReport(Record):
    action: Literal["retry", "discard"]
    dry_run: bool
    matched: list[int] = Field(description="Open dead letters that matched, newest first.")
    done: list[int] = Field(description="Retried or discarded by this request.")
    failed: dict[str, str] = Field(description="Dead letter id to why it was not drained.")
    refused: dict[str, str] = Field(
        description="Dead letter id to why the rules refuse it (a dry run lists them here"
        " too, so it says exactly what the real run would refuse)."
    )


class Health(Record):
    status: Literal["ok"]


class WorkerHealth(Record):
    """What the workers say of themselves in their heartbeat rows. Reported,
    not judged: this process can store callbacks without any worker, so its
    own readiness does not depend on theirs (each worker answers its own
    ``/readyz`` beside its metrics)."""

    live: int = Field(ge=0, description="Workers alive and doing their job.")
    unhealthy: int = Field(
        ge=0,
        description="Workers that said in the last 10 minutes that they could not do their "
        "job (a vital thread died or hung): they hand their sessions back and exit, and "
        "their supervisor starts new ones.",
    )
    problem: str | None = Field(description="One of their problems, as the worker said it.")


class Readiness(Record):
    status: Literal["ready", "unavailable"]
    checks: dict[Literal["database", "broker"], str] = Field(
        description='"ok", or "error: <exception type>".'
    )
    workers: WorkerHealth | None = Field(
        default=None, description="The workers' own health; null when the database does not answer."
    )


class SupersededCall(Record):
    """A recorded tool call an operator's acceptance made obsolete (kept, audited)."""

    idempotency_key: str
    call_index: int = Field(ge=0)
    tool: str
    status: str
    args_hash: str | None


class BlockedSessionOutcome(Record):
    """What an operator's action on a blocked session did."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "session_id": "3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
                    "action": "resume",
                    "status": "pending",
                    "blocked": {
                        "kind": "missing_step",
                        "step": "pay",
                        "message": "the session needs step 'pay', which agent 'trip' no "
                        "longer has in the deployed code",
                        "recorded": {"step": "pay"},
                        "requested": None,
                        "from": "running",
                    },
                    "superseded": [],
                }
            ]
        }
    )

    session_id: uuid.UUID
    action: Literal["resume", "accept", "fail"]
    status: SessionStatus = Field(
        description="Where the session went: `pending` (it runs again), `compensating` "
        "(its saga runs, then it is dead-lettered)."
    )
    blocked: JsonObject = Field(
        description="Why it was blocked: `kind`, `step`, `message`, what was `recorded`, "
        "what the code `requested`, the status it was parked `from`."
    )
    superseded: list[SupersededCall] = Field(
        description="The recorded calls an `accept` superseded (empty otherwise)."
    )


class TriggeredSchedule(Record):
    """What ``POST /v1/schedules/{name}/trigger`` started."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "schedule": "weekday-summary",
                    "session_id": "3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45",
                }
            ]
        }
    )

    schedule: str
    session_id: uuid.UUID
