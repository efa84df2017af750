"""The tables, defined with SQLModel for the migrations (and the test that
the migrated schema equals these models). Every statement, reads included,
is named in the ``*_queries.py`` modules beside this one and run by the typed
function beside it; a read of a whole row answers its dataclass of
``records.py`` (which a test holds equal to these classes), so reads need
neither SQLModel nor the ORM."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from resumable.models import metrics_queries
from resumable.models.coordination_queries import WAITING_PARENTS_WHERE
from resumable.models.status import SagaOutcome, SessionStatus, ToolCallStatus, sql_values

# Deterministic constraint names, so the schema built by the migrations and
# the one built from these models can be compared name for name.
SQLModel.metadata.naming_convention = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

_SESSION_STATUSES = sql_values(SessionStatus)
# Migration 0009: finished sessions, in declaration order (the partial index's predicate).
_TERMINAL = metrics_queries.TERMINAL
_TOOL_CALL_STATUSES = sql_values(ToolCallStatus)
_SAGA_OUTCOMES = sql_values(SagaOutcome)


def _now() -> sa.TextClause:
    return sa.text("now()")


def _timestamp(nullable: bool = False, default_now: bool = False) -> Any:
    return sa.Column(
        sa.DateTime(timezone=True),
        nullable=nullable,
        server_default=_now() if default_now else None,
    )


def _jsonb(nullable: bool = True) -> Any:
    return sa.Column(JSONB, nullable=nullable)


# Percent of a sessions page filled by inserts; the rest is room for HOT updates.
SESSIONS_FILLFACTOR = 80


class SessionRow(SQLModel, table=True):
    """One run of an agent: its current state is materialised here so loading
    it for the next step is a single-row read, whatever the history holds."""

    __tablename__ = "sessions"
    __table_args__ = (
        sa.CheckConstraint(f"status IN ({_SESSION_STATUSES})", name="status"),
        sa.CheckConstraint("priority IN ('high', 'normal', 'low')", name="priority"),
        # No index names a column that a step in mid-run changes (step_seq,
        # the lease's expiry; such a step leaves updated_at alone): its update
        # is then HOT, and writes no index entry (migration 0015). Running
        # sessions are found through this index, by status.
        sa.Index("ix_sessions_status_updated_at", "status", "updated_at"),
        sa.Index("ix_sessions_agent_created_at", "agent", "created_at"),
        sa.Index("ix_sessions_wake_at", "wake_at", postgresql_where=sa.text("wake_at IS NOT NULL")),
        sa.Index("ix_sessions_created_at_id", "created_at", "id"),
        sa.Index(
            "ix_sessions_finished_at",
            "finished_at",
            postgresql_where=sa.text("finished_at IS NOT NULL"),
        ),
        # Migration 0023: the sessions neither finished nor at rest, counted
        # by a /metrics scrape (the others have kept counts); it replaced
        # migration 0009's ix_sessions_live, which held the resting ones too.
        sa.Index(
            "ix_sessions_active",
            "agent",
            "status",
            postgresql_where=sa.text(metrics_queries.ACTIVE_WHERE),
        ),
        sa.Index(
            "ix_sessions_parent_id", "parent_id", postgresql_where=sa.text("parent_id IS NOT NULL")
        ),
        # Migration 0013: is any child of a parent still running (fan-in, linear).
        sa.Index(
            "ix_sessions_unfinished_children",
            "parent_id",
            postgresql_where=sa.text(f"parent_id IS NOT NULL AND status NOT IN ({_TERMINAL})"),
        ),
        # Migration 0017: the parents waiting on children, which the
        # scheduler asks for every tick (coordination_queries.WAITING_PARENTS).
        sa.Index(
            "ix_sessions_waiting_parents",
            "updated_at",
            postgresql_where=sa.text(WAITING_PARENTS_WHERE),
        ),
        # Migration 0015 (0011 had step_seq here): compaction candidates
        # without reading every session.
        sa.Index("ix_sessions_uncompacted", sa.text("(step_seq_mark - compacted_to)")),
        # Migration 0025: the sessions holding a concurrency slot of a key,
        # and those waiting for one, oldest first (resumable/limits.py).
        sa.Index(
            "ix_sessions_slot_holders",
            "concurrency_key",
            postgresql_where=sa.text("concurrency_key IS NOT NULL AND status = 'running'"),
        ),
        sa.Index(
            "ix_sessions_slot_waiters",
            "concurrency_key",
            "slot_wait_since",
            "id",
            postgresql_where=sa.text("slot_wait_since IS NOT NULL AND status = 'pending'"),
        ),
        # Room on each page for a row's next version: a HOT update needs it.
        {"postgresql_with": {"fillfactor": SESSIONS_FILLFACTOR}},
    )

    id: uuid.UUID = Field(primary_key=True)
    agent: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    status: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    cursor: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    step_seq: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    state: dict[str, Any] = Field(sa_column=_jsonb(nullable=False))
    input: Any = Field(default=None, sa_column=_jsonb())
    result: Any = Field(default=None, sa_column=_jsonb())
    error: dict[str, Any] | None = Field(default=None, sa_column=_jsonb())
    attempts: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    lease_epoch: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0")
    )
    lease_owner: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    lease_expires_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    wake_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    idempotency_key: str | None = Field(
        default=None, sa_column=sa.Column(sa.Text, nullable=True, unique=True)
    )
    created_at: datetime = Field(sa_column=_timestamp(default_now=True))
    updated_at: datetime = Field(sa_column=_timestamp(default_now=True))
    finished_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    # Added in migration 0002 (PostgreSQL appends new columns; keep the order).
    wait: dict[str, Any] | None = Field(default=None, sa_column=_jsonb())
    wake: dict[str, Any] | None = Field(default=None, sa_column=_jsonb())
    # Added in migration 0004: where a fork came from.
    forked_from: uuid.UUID | None = Field(default=None, sa_column=sa.Column(sa.Uuid, nullable=True))
    forked_at_seq: int | None = Field(default=None, sa_column=sa.Column(sa.Integer, nullable=True))
    # The live state was changed outside a step (an operator's patch, a fork):
    # the next checkpoint must be a full snapshot, not a delta.
    history_rebase: bool = Field(
        default=False,
        sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.text("false")),
    )
    # Checkpoints up to this seq were removed by compaction.
    compacted_to: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    # Added in migration 0005: while running, when the current step started and
    # when its time limit passes (NULL: no limit), to find hung steps.
    step_started_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    step_deadline: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    # Added in migration 0007: why the session is `blocked` (what was recorded,
    # what the code asked for, the status to go back to); NULL otherwise.
    blocked_reason: dict[str, Any] | None = Field(default=None, sa_column=_jsonb())
    # The agent version that serves the session (a worker of another version
    # does not claim it) and the one it started on (``ctx.version``); both 0
    # for unversioned code. See resumable/versions.py.
    agent_version: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    started_version: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    # Added in migration 0009: the W3C trace context (traceparent, tracestate)
    # captured at start; every span of the session joins that trace.
    trace_context: dict[str, Any] | None = Field(default=None, sa_column=_jsonb())
    # Added in migration 0010: the session whose step spawned this one.
    parent_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(sa.Uuid, nullable=True))
    # Added in migration 0012: the JSON Patch from `state` to the live state,
    # appended by incremental steps so they need not rewrite a large state;
    # NULL when `state` is the live state (see resumable/models/live_state.py).
    state_patch: list[Any] | None = Field(default=None, sa_column=_jsonb())
    # Added in migration 0015: `step_seq` as of the session's last stop
    # (suspended, finished, ...) or its last multiple of ``step_queries.STEP_SEQ_MARK_EVERY``,
    # what the compaction index reads: indexing `step_seq` itself would make
    # every step's update write every index.
    step_seq_mark: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    # Added in migration 0025: the concurrency key (and its limit) a limited
    # agent's claim stamped, and since when the session waits for a slot
    # (NULL: it does not). See resumable/limits.py.
    concurrency_key: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    concurrency_limit: int | None = Field(
        default=None, sa_column=sa.Column(sa.Integer, nullable=True)
    )
    slot_wait_since: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    # Added in migration 0026: the lane its messages go on (resumable/priorities.py).
    priority: str = Field(
        default="normal",
        sa_column=sa.Column(sa.Text, nullable=False, server_default="normal"),
    )


class CheckpointRow(SQLModel, table=True):
    """Append-only history: the state after each committed step, as a
    snapshot, a delta from the previous row, or the step's events."""

    __tablename__ = "checkpoints"
    __table_args__ = (
        sa.CheckConstraint("kind IN ('snapshot','delta','events')", name="kind"),
        sa.Index(
            "ix_checkpoints_snapshots",
            "session_id",
            "seq",
            postgresql_where=sa.text("kind = 'snapshot'"),
        ),
    )

    session_id: uuid.UUID = Field(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
        )
    )
    seq: int = Field(sa_column=sa.Column(sa.Integer, primary_key=True))
    step: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    next_step: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    # The (redacted) state on snapshot rows; NULL on delta and event rows.
    state: dict[str, Any] | None = Field(default=None, sa_column=_jsonb())
    created_at: datetime = Field(sa_column=_timestamp(default_now=True))
    # Added in migration 0004: how this row is stored (see resumable/checkpoints.py).
    kind: str = Field(
        default="snapshot",
        sa_column=sa.Column(sa.Text, nullable=False, server_default="snapshot"),
    )
    patch: list[dict[str, Any]] | None = Field(default=None, sa_column=_jsonb())
    events: list[Any] | None = Field(default=None, sa_column=_jsonb())


class AuditEventRow(SQLModel, table=True):
    """Append-only audit log (the seed's ``agent_audit_logs``): every step,
    transition and operator action, in order."""

    __tablename__ = "audit_events"
    __table_args__ = (sa.Index("ix_audit_events_session_id_id", "session_id", "id"),)

    id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.Identity(), primary_key=True)
    )
    session_id: uuid.UUID = Field(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
        )
    )
    seq: int | None = Field(default=None, sa_column=sa.Column(sa.Integer, nullable=True))
    step: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    event_type: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    payload: dict[str, Any] = Field(
        sa_column=sa.Column(JSONB, nullable=False, server_default=sa.text("'{}'::jsonb"))
    )
    created_at: datetime = Field(sa_column=_timestamp(default_now=True))


class ToolCallRow(SQLModel, table=True):
    """The tool-call cache (the seed's ``tool_execution_cache``): one row per
    logical call, keyed by its deterministic idempotency key."""

    __tablename__ = "tool_execution_cache"
    __table_args__ = (
        sa.CheckConstraint(f"status IN ({_TOOL_CALL_STATUSES})", name="status"),
        sa.Index("ix_tool_execution_cache_session_id_step_seq", "session_id", "step_seq"),
    )

    # The primary key is (idempotency_key, session_id) since migration 0027:
    # a table distributed by session id keeps only unique indexes that hold it.
    idempotency_key: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    session_id: uuid.UUID = Field(
        sa_column=sa.Column(
            sa.Uuid,
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            primary_key=True,
            nullable=False,
        )
    )
    step_seq: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    step: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    call_index: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    tool: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    request: Any = Field(sa_column=_jsonb(nullable=False))
    status: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    response: Any = Field(default=None, sa_column=_jsonb())
    error: dict[str, Any] | None = Field(default=None, sa_column=_jsonb())
    lease_epoch: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    attempts: int = Field(
        default=1, sa_column=sa.Column(sa.Integer, nullable=False, server_default="1")
    )
    created_at: datetime = Field(sa_column=_timestamp(default_now=True))
    updated_at: datetime = Field(sa_column=_timestamp(default_now=True))
    # Added in migration 0003: the saga compensation of this call, if any.
    compensation: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    compensation_status: str | None = Field(
        default=None, sa_column=sa.Column(sa.Text, nullable=True)
    )
    compensation_attempts: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    compensation_error: dict[str, Any] | None = Field(default=None, sa_column=_jsonb())
    compensated_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    # Added in migration 0007: a hash of the call's (unredacted) arguments, so
    # a replay that asks for other arguments at this position is detected; and
    # when an operator accepted new behaviour, which made this record obsolete.
    args_hash: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    superseded_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    superseded_by: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))


class CallbackRow(SQLModel, table=True):
    """A single-use callback token created by a step for an external system.

    ``open`` until a delivery arrives (``received``) or the wait it belongs to
    ends (``closed``); a delivery to a closed token is answered 409.
    """

    __tablename__ = "callbacks"
    __table_args__ = (
        sa.CheckConstraint("status IN ('open','received','closed')", name="status"),
        sa.UniqueConstraint("session_id", "step_seq", "call_index"),
    )

    token: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    session_id: uuid.UUID = Field(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
        )
    )
    step_seq: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    call_index: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    topic: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    status: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    created_at: datetime = Field(sa_column=_timestamp(default_now=True))
    closed_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))


class DeliveryRow(SQLModel, table=True):
    """An inbound event (callback or signal), durable before it is acknowledged
    and consumed exactly once, in the transaction of the step that uses it."""

    __tablename__ = "deliveries"
    __table_args__ = (
        sa.CheckConstraint("kind IN ('callback','signal')", name="kind"),
        sa.CheckConstraint("status IN ('pending','consumed')", name="status"),
        sa.Index(
            "uq_deliveries_token",
            "token",
            unique=True,
            postgresql_where=sa.text("kind = 'callback'"),
        ),
        sa.Index(
            "uq_deliveries_signal_dedupe",
            "session_id",
            "topic",
            "dedupe_key",
            unique=True,
            postgresql_where=sa.text("kind = 'signal' AND dedupe_key IS NOT NULL"),
        ),
        sa.Index(
            "ix_deliveries_pending",
            "session_id",
            "id",
            postgresql_where=sa.text("status = 'pending'"),
        ),
        # Migration 0011: retention's cascading delete finds them by session.
        sa.Index("ix_deliveries_session_id", "session_id"),
    )

    id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.Identity(), primary_key=True)
    )
    session_id: uuid.UUID = Field(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
        )
    )
    kind: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    token: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    topic: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    dedupe_key: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    payload: Any = Field(sa_column=_jsonb())
    status: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    received_at: datetime = Field(sa_column=_timestamp(default_now=True))
    consumed_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    consumed_seq: int | None = Field(default=None, sa_column=sa.Column(sa.Integer, nullable=True))


class AgentInfoRow(SQLModel, table=True):
    """Agents that workers have announced, so the web process can refuse an
    unknown agent name without importing any agent code."""

    __tablename__ = "agents"

    name: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    steps: list[str] = Field(sa_column=_jsonb(nullable=False))
    checks: list[str] = Field(sa_column=_jsonb(nullable=False))
    updated_at: datetime = Field(sa_column=_timestamp(default_now=True))


class WorkerRow(SQLModel, table=True):
    """A live worker process (``host:pid``, the prefix of the lease owners it
    writes) and the agents it loads, kept alive by a heartbeat: past
    ``expires_at`` its sessions can be claimed before their leases expire, and
    an agent no live worker loads is not claimed at all."""

    __tablename__ = "workers"

    id: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    agents: list[str] = Field(sa_column=_jsonb(nullable=False))
    started_at: datetime = Field(sa_column=_timestamp(default_now=True))
    heartbeat_at: datetime = Field(sa_column=_timestamp(default_now=True))
    expires_at: datetime = Field(sa_column=_timestamp())
    # Set by the reconciler once it re-enqueued a dead worker's sessions.
    reaped_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    # The version of each agent it loads ({"refund": 3}) and the older
    # versions it migrates (["refund@2"]): what a claim compares with.
    versions: dict[str, int] = Field(
        default_factory=dict,
        sa_column=sa.Column(JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    )
    takes_over: list[str] = Field(
        default_factory=list,
        sa_column=sa.Column(JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
    )
    # Why it cannot do its job (a vital thread died or hung; NULL: nothing
    # wrong): written by its heartbeat, kept after it exits for that reason.
    problem: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    # The fingerprint of each agent it loads ({"refund": "3f2a..."}; migration
    # 0020): live workers that disagree on an unversioned agent run other code.
    fingerprints: dict[str, str] = Field(
        default_factory=dict,
        sa_column=sa.Column(JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    )


class AgentVersionRow(SQLModel, table=True):
    """Every version of an agent a worker announced, with a fingerprint of
    the names sessions record (steps and aliases, checks, compensations): a
    version announced again with another fingerprint is changed code that
    kept its version number, which the announcing worker warns about."""

    __tablename__ = "agent_versions"

    agent: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    version: int = Field(sa_column=sa.Column(sa.Integer, primary_key=True))
    fingerprint: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    steps: list[str] = Field(sa_column=_jsonb(nullable=False))
    checks: list[str] = Field(sa_column=_jsonb(nullable=False))
    compensations: list[str] = Field(sa_column=_jsonb(nullable=False))
    takes_over: list[int] = Field(sa_column=_jsonb(nullable=False))
    first_announced_at: datetime = Field(sa_column=_timestamp(default_now=True))
    last_announced_at: datetime = Field(sa_column=_timestamp(default_now=True))


class DeadLetterRow(SQLModel, table=True):
    """A session that failed for good, kept for an operator to inspect, retry
    or discard. PostgreSQL is the record; dramatiq's Redis dead-letter set is not."""

    __tablename__ = "dead_letters"
    __table_args__ = (
        sa.CheckConstraint("status IN ('open','retried','discarded')", name="status"),
        sa.CheckConstraint(f"compensation IN ({_SAGA_OUTCOMES})", name="compensation"),
        sa.Index(
            "uq_dead_letters_open_session",
            "session_id",
            unique=True,
            postgresql_where=sa.text("status = 'open'"),
        ),
        sa.Index("ix_dead_letters_status_failed_at", "status", "failed_at"),
        # Migration 0011: retention's cascading delete finds them by session.
        sa.Index("ix_dead_letters_session_id", "session_id"),
    )

    id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.Identity(), primary_key=True)
    )
    session_id: uuid.UUID = Field(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
        )
    )
    agent: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    step: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    error_code: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    error_type: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    error_message: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    traceback: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    attempts: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    compensation: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    compensation_error: dict[str, Any] | None = Field(default=None, sa_column=_jsonb())
    status: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    failed_at: datetime = Field(sa_column=_timestamp(default_now=True))
    resolved_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    resolved_by: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    resolution: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))


class AlertRow(SQLModel, table=True):
    """An operator alert waiting to be POSTed (an outbox: written in the same
    transaction as what it reports, delivered with retries by the scheduler)."""

    __tablename__ = "alerts"
    __table_args__ = (
        # Migration 0019: `cancelled`, a failed child's alert once its parent
        # handled the failure (see coordination_queries.WAKE_PARENT), found
        # by its session among the pending ones.
        sa.CheckConstraint("status IN ('pending','sent','failed','cancelled')", name="status"),
        sa.Index(
            "ix_alerts_pending", "next_attempt_at", postgresql_where=sa.text("status = 'pending'")
        ),
        sa.Index(
            "ix_alerts_pending_session",
            "session_id",
            postgresql_where=sa.text("status = 'pending'"),
        ),
    )

    id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.Identity(), primary_key=True)
    )
    kind: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    session_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(sa.Uuid, nullable=True))
    payload: dict[str, Any] = Field(sa_column=_jsonb(nullable=False))
    status: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    attempts: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    last_error: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    next_attempt_at: datetime = Field(sa_column=_timestamp(default_now=True))
    created_at: datetime = Field(sa_column=_timestamp(default_now=True))
    sent_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))


class ArchivedSessionRow(SQLModel, table=True):
    """A finished session moved out of the live tables by retention (when
    ``RESUMABLE_RETENTION_MODE=archive``): the session, its checkpoints and
    its audit log as one JSON document."""

    __tablename__ = "archived_sessions"

    session_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, primary_key=True))
    agent: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    status: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    finished_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    archived_at: datetime = Field(sa_column=_timestamp(default_now=True))
    document: dict[str, Any] = Field(sa_column=_jsonb(nullable=False))


# Migrations 0009 and 0016: triggers keep `finished_session_counts`; 0023:
# `resting_session_counts` (see metrics_queries).
for _ddl in (
    metrics_queries.COUNT_FINISHED_FUNCTION,
    metrics_queries.COUNT_FINISHED_DELETED_FUNCTION,
    *metrics_queries.COUNT_FINISHED_TRIGGERS,
    metrics_queries.COUNT_RESTING_FUNCTION,
    metrics_queries.COUNT_RESTING_DELETED_FUNCTION,
    *metrics_queries.COUNT_RESTING_TRIGGERS,
):
    sa.event.listen(
        SessionRow.__table__,  # type: ignore[attr-defined]
        "after_create",
        sa.DDL(_ddl),  # type: ignore[no-untyped-call]
    )


class FinishedSessionCountRow(SQLModel, table=True):
    """Finished sessions by agent and status, kept by triggers on ``sessions``
    (migration 0009), so a /metrics scrape does not count finished rows; spread
    over shards (migration 0014) so finishing sessions do not queue on one row."""

    __tablename__ = "finished_session_counts"

    agent: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    status: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    n: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0")
    )
    shard: int = Field(
        default=0,
        sa_column=sa.Column(sa.SmallInteger, primary_key=True, server_default="0"),
    )


class RestingSessionCountRow(SQLModel, table=True):
    """Suspended and blocked sessions by agent and status, kept by triggers on
    ``sessions`` (migration 0023) and sharded as the finished counts are, so a
    /metrics scrape does not count the hundreds of thousands that may wait."""

    __tablename__ = "resting_session_counts"

    agent: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    status: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    shard: int = Field(sa_column=sa.Column(sa.SmallInteger, primary_key=True))
    n: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0")
    )


class SessionConditionRow(SQLModel, table=True):
    """A lingering condition (overdue, unserved, hung, blocked) an operator was
    alerted about; open until it clears, when a "resolved" alert is sent."""

    __tablename__ = "session_conditions"
    __table_args__ = (
        sa.Index(
            "ix_session_conditions_open",
            "session_id",
            "condition",
            unique=True,
            postgresql_where=sa.text("resolved_at IS NULL"),
        ),
    )

    id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.Identity(), primary_key=True)
    )
    session_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    condition: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    detail: dict[str, Any] = Field(sa_column=_jsonb(nullable=False))
    opened_at: datetime = Field(sa_column=_timestamp(default_now=True))
    resolved_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))


class SharedDocumentRow(SQLModel, table=True):
    """A named JSON document shared by sessions (``ctx.shared`` reads it,
    ``ctx.update_shared`` changes it in the transaction of the step that asked).
    ``version`` counts committed updates; 0 means never written."""

    __tablename__ = "shared_documents"

    name: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    value: Any = Field(default=None, sa_column=_jsonb())
    version: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0")
    )
    updated_at: datetime = Field(sa_column=_timestamp(default_now=True))
    updated_by: uuid.UUID | None = Field(default=None, sa_column=sa.Column(sa.Uuid, nullable=True))


class SharedVersionRow(SQLModel, table=True):
    """Append-only history of a shared document: each committed value and the
    session, step and sequence number that wrote it (no foreign key: the
    history outlives sessions removed by retention)."""

    __tablename__ = "shared_versions"
    # Migration 0013: retention finds old versions without reading the history.
    __table_args__ = (sa.Index("ix_shared_versions_created_at", "created_at"),)

    name: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    version: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True))
    value: Any = Field(default=None, sa_column=_jsonb())
    session_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    seq: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    step: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    created_at: datetime = Field(sa_column=_timestamp(default_now=True))


class LockRow(SQLModel, table=True):
    """A named lock or semaphore: how many sessions may hold it at once and
    the last fencing token it issued (tokens only grow)."""

    __tablename__ = "coordination_locks"

    name: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    permits: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    fence: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0")
    )


class LockRequestRow(SQLModel, table=True):
    """A session's place at a lock: ``waiting`` in FIFO order of ``id``, then
    ``held`` with a fencing token issued for the lease epoch that asked for it
    (re-issued, larger, when another epoch of the session asks again)."""

    __tablename__ = "coordination_lock_requests"
    __table_args__ = (
        sa.CheckConstraint("status IN ('waiting','held')", name="status"),
        sa.UniqueConstraint("name", "session_id"),
        sa.Index("ix_coordination_lock_requests_session_id", "session_id"),
    )

    id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.Identity(), primary_key=True)
    )
    name: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    session_id: uuid.UUID = Field(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
        )
    )
    status: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    token: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger, nullable=True))
    token_epoch: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger, nullable=True))
    requested_at: datetime = Field(sa_column=_timestamp(default_now=True))
    granted_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))


class ActivitySampleRow(SQLModel, table=True):
    """What the system was doing, once a minute (migration 0021): the console's
    charts. ``steps`` and ``failures`` are PostgreSQL's running counts of
    rows inserted into ``checkpoints`` (one per committed step) and
    ``dead_letters``; a chart reads their differences between samples (a
    server restart resets them: that minute is skipped)."""

    __tablename__ = "activity_samples"

    at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), primary_key=True))
    pending: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    running: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    suspended: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    retrying: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    blocked: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    steps: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    failures: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    # The audit log's newest event at the sample: the next one counts the
    # resumes after it (their latency, from a delivery's arrival to the claim).
    # (Migration 0022.)
    last_event_id: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0")
    )
    resumes: int | None = Field(default=None, sa_column=sa.Column(sa.Integer, nullable=True))
    resume_p50_ms: float | None = Field(default=None, sa_column=sa.Column(sa.Float, nullable=True))
    resume_p95_ms: float | None = Field(default=None, sa_column=sa.Column(sa.Float, nullable=True))


class ScheduleRow(SQLModel, table=True):
    """A schedule (``resumable/schedules.py``, migration 0024): when to start
    a session of `agent`, and what its last run did. ``next_due_at`` is the
    next due time not yet handled; the scheduler locks a due row while it
    starts its sessions and moves it on in the same transaction."""

    __tablename__ = "schedules"
    __table_args__ = (
        sa.CheckConstraint("(cron IS NULL) <> (every_seconds IS NULL)", name="cron_or_every"),
        sa.CheckConstraint("catch_up IN ('skip','latest','all')", name="catch_up"),
        sa.CheckConstraint("overlap IN ('skip','allow','queue')", name="overlap"),
        sa.CheckConstraint("source IN ('code','api')", name="source"),
        # The scheduler's pass: due rows that are not paused, oldest first.
        sa.Index(
            "ix_schedules_next_due_at",
            "next_due_at",
            postgresql_where=sa.text("NOT paused"),
        ),
        # The runs kept until a live session ends (overlap "queue"): few.
        sa.Index(
            "ix_schedules_queued",
            "last_session_id",
            postgresql_where=sa.text("queued_due_at IS NOT NULL"),
        ),
    )

    name: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    agent: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    cron: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    every_seconds: float | None = Field(default=None, sa_column=sa.Column(sa.Float, nullable=True))
    timezone: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    input: Any = Field(default=None, sa_column=_jsonb())
    catch_up: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    overlap: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    source: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    # The version of the agent whose code defined it (0: unversioned, or made
    # at run time): during a rolling deploy an older worker that starts does
    # not put back its older definition.
    agent_version: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    paused: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean, nullable=False, server_default="false")
    )
    paused_by: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    paused_reason: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    anchor_at: datetime = Field(sa_column=_timestamp())
    next_due_at: datetime = Field(sa_column=_timestamp())
    queued_due_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    last_due_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    last_session_id: uuid.UUID | None = Field(
        default=None, sa_column=sa.Column(sa.Uuid, nullable=True)
    )
    last_started_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    started_runs: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0")
    )
    skipped_runs: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0")
    )
    created_at: datetime = Field(sa_column=_timestamp(default_now=True))
    created_by: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    updated_at: datetime = Field(sa_column=_timestamp(default_now=True))
