"""activity_samples: the latency of the resumes since the previous sample

Each claim of a session woken by a callback or a signal records in its audit
event how long ago the delivery arrived (``waited_ms``). A sample keeps the
audit log's newest event id (``last_event_id``), so the next one counts the
resumes after it, and their median and 95th percentile latency: the
console's resume-latency chart.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 10:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.add_column(
        "activity_samples",
        sa.Column("last_event_id", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.add_column("activity_samples", sa.Column("resumes", sa.Integer(), nullable=True))
    op.add_column("activity_samples", sa.Column("resume_p50_ms", sa.Float(), nullable=True))
    op.add_column("activity_samples", sa.Column("resume_p95_ms", sa.Float(), nullable=True))


def downgrade() -> None:
    for column in ("resume_p95_ms", "resume_p50_ms", "resumes", "last_event_id"):
        op.drop_column("activity_samples", column)
