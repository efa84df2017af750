"""The columns each table's row class (``tables.py``) reads, by name, for
the statements that select whole rows. Written out rather than taken from the
classes so that a process which only runs statements (a worker) need not
import SQLModel and SQLAlchemy to build its SQL; tests/unit/test_row_columns.py
holds each tuple equal to its class's fields, in order."""

from __future__ import annotations

# ToolCallRow
TOOL_CALL_FIELDS: tuple[str, ...] = (
    "idempotency_key",
    "session_id",
    "step_seq",
    "step",
    "call_index",
    "tool",
    "request",
    "status",
    "response",
    "error",
    "lease_epoch",
    "attempts",
    "created_at",
    "updated_at",
    "compensation",
    "compensation_status",
    "compensation_attempts",
    "compensation_error",
    "compensated_at",
    "args_hash",
    "superseded_at",
    "superseded_by",
)

# CallbackRow
CALLBACK_FIELDS: tuple[str, ...] = (
    "token",
    "session_id",
    "step_seq",
    "call_index",
    "topic",
    "status",
    "created_at",
    "closed_at",
)

# AuditEventRow
AUDIT_EVENT_FIELDS: tuple[str, ...] = (
    "id",
    "session_id",
    "seq",
    "step",
    "event_type",
    "payload",
    "created_at",
)

# SessionRow
SESSION_FIELDS: tuple[str, ...] = (
    "id",
    "agent",
    "status",
    "cursor",
    "step_seq",
    "state",
    "input",
    "result",
    "error",
    "attempts",
    "lease_epoch",
    "lease_owner",
    "lease_expires_at",
    "wake_at",
    "idempotency_key",
    "created_at",
    "updated_at",
    "finished_at",
    "wait",
    "wake",
    "forked_from",
    "forked_at_seq",
    "history_rebase",
    "compacted_to",
    "step_started_at",
    "step_deadline",
    "blocked_reason",
    "agent_version",
    "started_version",
    "trace_context",
    "parent_id",
    "state_patch",
    "step_seq_mark",
)

# DeadLetterRow
DEAD_LETTER_FIELDS: tuple[str, ...] = (
    "id",
    "session_id",
    "agent",
    "step",
    "error_code",
    "error_type",
    "error_message",
    "traceback",
    "attempts",
    "compensation",
    "compensation_error",
    "status",
    "failed_at",
    "resolved_at",
    "resolved_by",
    "resolution",
)
