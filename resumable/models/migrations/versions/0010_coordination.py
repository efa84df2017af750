"""coordination: shared documents, locks and semaphores, child sessions

Named JSON documents shared by sessions, with their version history, and
named locks (a semaphore is a lock with more than one permit) with a FIFO
queue of requests and monotonic fencing tokens; a session's parent.

Revision ID: 0010
Revises: 0007
Create Date: 2026-12-01 03:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.add_column("sessions", sa.Column("parent_id", sa.Uuid(), nullable=True))
    op.create_index(
        "ix_sessions_parent_id",
        "sessions",
        ["parent_id"],
        unique=False,
        postgresql_where=sa.text("parent_id IS NOT NULL"),
    )
    op.create_table(
        "shared_documents",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("version", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("updated_by", sa.Uuid(), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_shared_documents")),
    )
    op.create_table(
        "shared_versions",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("session_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("step", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", "version", name=op.f("pk_shared_versions")),
    )
    op.create_table(
        "coordination_locks",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("permits", sa.Integer(), nullable=False),
        sa.Column("fence", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_coordination_locks")),
    )
    op.create_table(
        "coordination_lock_requests",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=True),
        sa.Column("token_epoch", sa.BigInteger(), nullable=True),
        sa.Column(
            "requested_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('waiting','held')", name=op.f("ck_coordination_lock_requests_status")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_coordination_lock_requests_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_coordination_lock_requests")),
        sa.UniqueConstraint(
            "name", "session_id", name=op.f("uq_coordination_lock_requests_name_session_id")
        ),
    )
    op.create_index(
        "ix_coordination_lock_requests_session_id",
        "coordination_lock_requests",
        ["session_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(
        "ix_coordination_lock_requests_session_id", table_name="coordination_lock_requests"
    )
    op.drop_table("coordination_lock_requests")
    op.drop_table("coordination_locks")
    op.drop_table("shared_versions")
    op.drop_table("shared_documents")
    op.drop_index(
        "ix_sessions_parent_id",
        table_name="sessions",
        postgresql_where=sa.text("parent_id IS NOT NULL"),
    )
    op.drop_column("sessions", "parent_id")
