"""blocked sessions

A session whose replay diverged from its record (another tool or other
arguments at a recorded position, a step, check or compensation the code no
longer has) is parked as `blocked` with the reason, for an operator. Tool
calls record a hash of their arguments, and an operator's acceptance of new
behaviour marks the recorded calls it replaces as superseded.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 03:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel

_BEFORE = (
    "'pending','running','suspended','retrying','compensating','completed','failed','cancelled'"
)
_AFTER = _BEFORE + ",'blocked'"


def _status_check(values: str) -> None:
    op.drop_constraint(op.f("ck_sessions_status"), "sessions", type_="check")
    op.create_check_constraint(op.f("ck_sessions_status"), "sessions", f"status IN ({values})")


def upgrade() -> None:
    _status_check(_AFTER)
    op.add_column(
        "sessions",
        sa.Column("blocked_reason", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )
    op.add_column("tool_execution_cache", sa.Column("args_hash", sa.Text(), nullable=True))
    op.add_column(
        "tool_execution_cache",
        sa.Column("superseded_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.add_column("tool_execution_cache", sa.Column("superseded_by", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("tool_execution_cache", "superseded_by")
    op.drop_column("tool_execution_cache", "superseded_at")
    op.drop_column("tool_execution_cache", "args_hash")
    op.drop_column("sessions", "blocked_reason")
    op.execute("UPDATE sessions SET status = 'pending' WHERE status = 'blocked'")
    _status_check(_BEFORE)
