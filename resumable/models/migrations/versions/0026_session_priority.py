"""session priority: high, normal or low, the lane its messages go on

Issue 42: a session's priority orders which pending session a free worker
takes next (``resumable/priorities.py``). A column with a constant default
is added without rewriting the table; no index names it (a step's update
stays HOT, migration 0015).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 00:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.add_column(
        "sessions", sa.Column("priority", sa.Text(), nullable=False, server_default="normal")
    )
    op.create_check_constraint(
        op.f("ck_sessions_priority"), "sessions", "priority IN ('high', 'normal', 'low')"
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_sessions_priority"), "sessions", type_="check")
    op.drop_column("sessions", "priority")
