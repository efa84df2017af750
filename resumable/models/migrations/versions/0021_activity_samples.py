"""activity_samples: what the system did, once a minute, for the console's charts

The scheduler samples the live sessions by status and PostgreSQL's running
counts of committed steps (rows inserted into ``checkpoints``) and of dead
letters, once a minute (one row per minute however many schedulers run), and
forgets samples older than two days.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 10:15:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.create_table(
        "activity_samples",
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("suspended", sa.Integer(), nullable=False),
        sa.Column("retrying", sa.Integer(), nullable=False),
        sa.Column("blocked", sa.Integer(), nullable=False),
        sa.Column("steps", sa.BigInteger(), nullable=False),
        sa.Column("failures", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("at", name=op.f("pk_activity_samples")),
    )


def downgrade() -> None:
    op.drop_table("activity_samples")
