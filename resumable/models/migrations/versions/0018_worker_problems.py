"""a worker's problem: why it cannot do its job

A worker whose consumer (or another vital thread) died kept a fresh
heartbeat and consumed nothing, and nothing outside it could tell. Its
heartbeat now writes why it cannot do its job, and the row of a worker that
exited for that reason keeps it, for ``/readyz`` and ``/metrics``.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 03:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.add_column("workers", sa.Column("problem", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("workers", "problem")
