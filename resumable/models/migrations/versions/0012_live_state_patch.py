"""live state patch

An incremental step no longer rewrites the whole live state on the session
row: it appends its JSON Patch to `sessions.state_patch`, and `state` plus
that patch is the live state. A later step folds the patch back into `state`
(at every history snapshot, when the patch grows past a fraction of the
state, and when the session completes); any statement that writes `state`
whole sets `state_patch` to NULL. PostgreSQL keeps an unchanged TOASTed
column's value in place, so such a step writes WAL in proportion to the
change, not to the state.

Revision ID: 0012
Revises: 0007
Create Date: 2026-12-01 03:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.add_column(
        "sessions",
        sa.Column("state_patch", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )


def downgrade() -> None:
    # Fold nothing back: a downgrade of a database with pending patches would
    # lose them, so refuse rather than lose state.
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT 1 FROM sessions WHERE state_patch IS NOT NULL) THEN "
        "RAISE EXCEPTION 'sessions have unfolded state patches: run them to a snapshot first'; "
        "END IF; END $$"
    )
    op.drop_column("sessions", "state_patch")
