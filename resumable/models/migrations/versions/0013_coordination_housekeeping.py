"""coordination housekeeping indexes

A child that finishes asks whether its parent, waiting for all of its
children, can wake. Counting the finished siblings made that question cost
the number of children, and so fan-in of N children cost N squared. An index
of the children that have not finished answers "is one still running?" by
reading one entry, and only the last child to finish runs the full count.

Shared documents keep a version per update; retention now deletes versions
older than ``RESUMABLE_RETENTION_DAYS`` (never a document's current one), and
finds them by ``created_at`` instead of reading the whole history.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 06:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

from resumable.models.metrics_queries import TERMINAL

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.create_index(
        "ix_sessions_unfinished_children",
        "sessions",
        ["parent_id"],
        postgresql_where=sa.text(f"parent_id IS NOT NULL AND status NOT IN ({TERMINAL})"),
    )
    op.create_index("ix_shared_versions_created_at", "shared_versions", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_shared_versions_created_at", table_name="shared_versions")
    op.drop_index(
        "ix_sessions_unfinished_children",
        table_name="sessions",
        postgresql_where=sa.text(f"parent_id IS NOT NULL AND status NOT IN ({TERMINAL})"),
    )
