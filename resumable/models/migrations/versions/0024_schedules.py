"""schedules: start sessions on a cron expression or an interval

One row a schedule (issue 42): its definition, whether it is paused, the
next due time not yet handled and what its last run did. The scheduler
locks due rows (``ix_schedules_next_due_at``) while it starts their sessions.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 15:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    now = sa.text("now()")
    op.create_table(
        "schedules",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text(), nullable=True),
        sa.Column("every_seconds", sa.Float(), nullable=True),
        sa.Column("timezone", sa.Text(), nullable=False),
        sa.Column("input", JSONB(), nullable=True),
        sa.Column("catch_up", sa.Text(), nullable=False),
        sa.Column("overlap", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("paused_by", sa.Text(), nullable=True),
        sa.Column("paused_reason", sa.Text(), nullable=True),
        sa.Column("anchor_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("queued_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_session_id", sa.Uuid(), nullable=True),
        sa.Column("last_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_runs", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("skipped_runs", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("created_by", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_schedules")),
        sa.CheckConstraint(
            "(cron IS NULL) <> (every_seconds IS NULL)", name=op.f("ck_schedules_cron_or_every")
        ),
        sa.CheckConstraint(
            "catch_up IN ('skip','latest','all')", name=op.f("ck_schedules_catch_up")
        ),
        sa.CheckConstraint(
            "overlap IN ('skip','allow','queue')", name=op.f("ck_schedules_overlap")
        ),
        sa.CheckConstraint("source IN ('code','api')", name=op.f("ck_schedules_source")),
    )
    op.create_index(
        "ix_schedules_next_due_at",
        "schedules",
        ["next_due_at"],
        postgresql_where=sa.text("NOT paused"),
    )
    op.create_index(
        "ix_schedules_queued",
        "schedules",
        ["last_session_id"],
        postgresql_where=sa.text("queued_due_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_schedules_queued", table_name="schedules")
    op.drop_index("ix_schedules_next_due_at", table_name="schedules")
    op.drop_table("schedules")
