"""concurrency slots: the key a limited session runs under, and its wait for a slot

Issue 42: an agent with ``Concurrency(limit, key)`` runs at most `limit`
sessions per key at once. The claim stamps a limited session with its key
and limit; a session over the limit stays pending with ``slot_wait_since``
set (no queue message) until a slot frees. Two partial indexes answer the
claim's questions without reading other sessions: who holds a slot of this
key (running), and who waits for one, oldest first. Neither names a column
a step in mid-run changes, so a step's update stays HOT (migration 0015).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06 18:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.add_column("sessions", sa.Column("concurrency_key", sa.Text(), nullable=True))
    op.add_column("sessions", sa.Column("concurrency_limit", sa.Integer(), nullable=True))
    op.add_column(
        "sessions", sa.Column("slot_wait_since", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_index(
        "ix_sessions_slot_holders",
        "sessions",
        ["concurrency_key"],
        postgresql_where=sa.text("concurrency_key IS NOT NULL AND status = 'running'"),
    )
    op.create_index(
        "ix_sessions_slot_waiters",
        "sessions",
        ["concurrency_key", "slot_wait_since", "id"],
        postgresql_where=sa.text("slot_wait_since IS NOT NULL AND status = 'pending'"),
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_slot_waiters", table_name="sessions")
    op.drop_index("ix_sessions_slot_holders", table_name="sessions")
    op.drop_column("sessions", "slot_wait_since")
    op.drop_column("sessions", "concurrency_limit")
    op.drop_column("sessions", "concurrency_key")
