"""What a read of whole rows answers: one dataclass per table, with the
table's columns as fields, in the table's order.

The table classes (``tables.py``) are SQLModel models, kept for the
migrations and the test that the migrated schema equals them; building reads
on them cost every command that lists sessions or dead letters SQLModel and
SQLAlchemy's ORM (0.3-0.5 s of a one-shot command's start-up, more than the
rest of its imports together). These are plain classes: the statements name
their columns from them (``columns.py``) and psycopg builds them directly.
tests/unit/test_row_columns.py holds each equal, field for field, to its
table class."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(slots=True, kw_only=True)
class SessionRecord:
    """A row of `sessions`, its `.state` the live state (``session_queries.live_row``)."""

    id: uuid.UUID
    agent: str
    status: str
    cursor: str | None = None
    step_seq: int = 0
    state: dict[str, Any]
    input: Any = None
    result: Any = None
    error: dict[str, Any] | None = None
    attempts: int = 0
    lease_epoch: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    wake_at: datetime | None = None
    idempotency_key: str | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    wait: dict[str, Any] | None = None
    wake: dict[str, Any] | None = None
    forked_from: uuid.UUID | None = None
    forked_at_seq: int | None = None
    history_rebase: bool = False
    compacted_to: int = 0
    step_started_at: datetime | None = None
    step_deadline: datetime | None = None
    blocked_reason: dict[str, Any] | None = None
    agent_version: int = 0
    started_version: int = 0
    trace_context: dict[str, Any] | None = None
    parent_id: uuid.UUID | None = None
    state_patch: list[Any] | None = None
    step_seq_mark: int = 0
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    slot_wait_since: datetime | None = None
    priority: str = "normal"

    @property
    def changed_at(self) -> datetime:
        """When the session last changed: a step that continues its run
        leaves `updated_at` alone (it is indexed; see COMMIT_STEP) and stamps
        `step_started_at`, the moment it committed."""
        if self.step_started_at is not None and self.step_started_at > self.updated_at:
            return self.step_started_at
        return self.updated_at


@dataclass(slots=True, kw_only=True)
class ToolCallRecord:
    """A row of `tool_calls`: one recorded call, its claim and its outcome."""

    idempotency_key: str
    session_id: uuid.UUID
    step_seq: int
    step: str
    call_index: int
    tool: str
    request: Any
    status: str
    response: Any = None
    error: dict[str, Any] | None = None
    lease_epoch: int
    attempts: int = 1
    created_at: datetime
    updated_at: datetime
    compensation: str | None = None
    compensation_status: str | None = None
    compensation_attempts: int = 0
    compensation_error: dict[str, Any] | None = None
    compensated_at: datetime | None = None
    args_hash: str | None = None
    superseded_at: datetime | None = None
    superseded_by: str | None = None


@dataclass(slots=True, kw_only=True)
class CallbackRecord:
    """A row of `callbacks`: a token a step handed out and whether it is still open."""

    token: str
    session_id: uuid.UUID
    step_seq: int
    call_index: int
    topic: str
    status: str
    created_at: datetime
    closed_at: datetime | None = None


@dataclass(slots=True, kw_only=True)
class AuditEventRecord:
    """A row of `audit_events`: one entry of a session's audit log."""

    id: int | None = None
    session_id: uuid.UUID
    seq: int | None = None
    step: str | None = None
    event_type: str
    payload: dict[str, Any]
    created_at: datetime


@dataclass(slots=True, kw_only=True)
class DeadLetterRecord:
    """A row of `dead_letters`: a session that kept failing, and what became of it."""

    id: int | None = None
    session_id: uuid.UUID
    agent: str
    step: str | None = None
    error_code: str
    error_type: str
    error_message: str
    traceback: str | None = None
    attempts: int
    compensation: str
    compensation_error: dict[str, Any] | None = None
    status: str
    failed_at: datetime
    resolved_at: datetime | None = None
    resolved_by: str | None = None
    resolution: str | None = None


@dataclass(slots=True, kw_only=True)
class ScheduleRecord:
    """A row of `schedules`: a schedule's definition, its next due time and its last run."""

    name: str
    agent: str
    cron: str | None = None
    every_seconds: float | None = None
    timezone: str
    input: Any = None
    catch_up: str
    overlap: str
    source: str
    agent_version: int = 0
    paused: bool = False
    paused_by: str | None = None
    paused_reason: str | None = None
    anchor_at: datetime
    next_due_at: datetime
    queued_due_at: datetime | None = None
    last_due_at: datetime | None = None
    last_session_id: uuid.UUID | None = None
    last_started_at: datetime | None = None
    started_runs: int = 0
    skipped_runs: int = 0
    created_at: datetime
    created_by: str | None = None
    updated_at: datetime
