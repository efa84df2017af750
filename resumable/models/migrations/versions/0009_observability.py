"""observability: trace context, cheap metric counts, lingering-session alerts

- ``sessions.trace_context``: the W3C trace context (``traceparent``,
  ``tracestate``) captured when the session started, so every span of its
  life, however long it waits, joins one trace.
- ``ix_sessions_live``: a partial index of the sessions that are not finished,
  so a /metrics scrape counts them without reading finished ones.
- ``finished_session_counts``: finished sessions by agent and status, kept by
  triggers (a session enters a terminal status once, so this costs one upsert
  per session, not per step), so the scrape reads a handful of rows.
- ``session_conditions``: the lingering conditions an alert was sent for,
  one open row per session and condition, resolved when it clears.

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-01 03:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

from resumable.models.metrics_queries import (
    ROW_COUNT_FINISHED_TRIGGERS,
    UNSHARDED_COUNT_FINISHED_FUNCTION,
)

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ = sqlmodel

# The triggers' text is shared with the models (resumable/models/tables.py
# creates them too), so a database built either way dumps the same. The
# function is as this revision wrote it: migration 0014 spreads the counts
# over shards and replaces it.
_TERMINAL = "'completed','failed','cancelled'"


def upgrade() -> None:
    op.add_column(
        "sessions",
        sa.Column("trace_context", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )
    op.create_index(
        "ix_sessions_live",
        "sessions",
        ["agent", "status"],
        unique=False,
        postgresql_where=sa.text(f"status NOT IN ({_TERMINAL})"),
    )
    op.create_table(
        "finished_session_counts",
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("n", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("agent", "status", name=op.f("pk_finished_session_counts")),
    )
    op.create_table(
        "session_conditions",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("session_id", sa.Uuid(), nullable=False),
        sa.Column("condition", sa.Text(), nullable=False),
        sa.Column("detail", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "opened_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_conditions")),
    )
    op.create_index(
        "ix_session_conditions_open",
        "session_conditions",
        ["session_id", "condition"],
        unique=True,
        postgresql_where=sa.text("resolved_at IS NULL"),
    )
    op.execute(UNSHARDED_COUNT_FINISHED_FUNCTION)
    # The counts of the sessions already finished; the triggers keep them from here.
    op.execute("LOCK TABLE sessions IN SHARE ROW EXCLUSIVE MODE")
    for trigger in ROW_COUNT_FINISHED_TRIGGERS:
        op.execute(trigger)
    op.execute(
        f"""INSERT INTO finished_session_counts (agent, status, n)
        SELECT agent, status, count(*) FROM sessions WHERE status IN ({_TERMINAL})
        GROUP BY agent, status"""
    )


def downgrade() -> None:
    for name in ("insert", "update", "delete"):
        op.execute(f"DROP TRIGGER sessions_count_finished_{name} ON sessions")
    op.execute("DROP FUNCTION resumable_count_finished()")
    op.drop_index("ix_session_conditions_open", table_name="session_conditions")
    op.drop_table("session_conditions")
    op.drop_table("finished_session_counts")
    op.drop_index("ix_sessions_live", table_name="sessions")
    op.drop_column("sessions", "trace_context")
