"""an index of the parents waiting on children

The scheduler's backstop for a parent whose wake-up was missed asks, every
tick, for the suspended sessions that wait on children. Read through the
status index, that walked every suspended session to find the few waiting on
children: 59 ms and 7,595 buffers at 200,000 sessions suspended on timers
and callbacks, growing with every long wait, several times a second. A
partial index holds only the parents, so the question costs what they
number. Its columns (status, wait, updated_at) change only when a session
suspends or wakes, which are never HOT updates anyway.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 14:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

from resumable.models.coordination_queries import WAITING_PARENTS_WHERE

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.create_index(
        "ix_sessions_waiting_parents",
        "sessions",
        ["updated_at"],
        postgresql_where=sa.text(WAITING_PARENTS_WHERE),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_sessions_waiting_parents",
        table_name="sessions",
        postgresql_where=sa.text(WAITING_PARENTS_WHERE),
    )
