"""indexes that keep periodic queries flat

Every query the scheduler runs periodically must cost the same at a million
finished sessions as at a thousand (``benchmarks/million.py``):

- the compaction candidate query orders sessions by how many checkpoints they
  hold beyond the last compaction: an index on that expression lets it read
  only the candidates, not every session;
- retention deletes finished sessions, and the deletion cascades to their
  deliveries and dead letters: without an index on ``session_id`` each deleted
  session cost a sequential scan of those tables.

Revision ID: 0011
Revises: 0007
Create Date: 2026-12-01 04:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.create_index("ix_sessions_uncompacted", "sessions", [sa.text("(step_seq - compacted_to)")])
    op.create_index("ix_deliveries_session_id", "deliveries", ["session_id"])
    op.create_index("ix_dead_letters_session_id", "dead_letters", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_dead_letters_session_id", table_name="dead_letters")
    op.drop_index("ix_deliveries_session_id", table_name="deliveries")
    op.drop_index("ix_sessions_uncompacted", table_name="sessions")
