"""step started and deadline

When the current step of a running session started and when its time limit
passes, so a hung step (blocked where the time limit cannot interrupt it) can
be found.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 00:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.add_column(
        "sessions", sa.Column("step_started_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("sessions", sa.Column("step_deadline", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("sessions", "step_deadline")
    op.drop_column("sessions", "step_started_at")
