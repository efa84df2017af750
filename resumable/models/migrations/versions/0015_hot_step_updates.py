"""steps in mid-run update no index

Every step commit updates its session's row. PostgreSQL can do that as a
heap-only (HOT) update, which writes no index entry at all, only when no
indexed column changes and the row's page has room for the new version.
Three indexes named columns that every step changed, so every step wrote an
entry into each of the table's twelve indexes:

- ``(status, updated_at)``: kept, and a step that continues its run no
  longer moves ``updated_at`` (``step_started_at`` says when it committed);
- ``(lease_expires_at) WHERE status = 'running'`` (the commit renews the
  lease): dropped; the reconciler reads running sessions by status;
- ``(step_seq - compacted_to)`` for compaction candidates: now on
  ``step_seq_mark``, a copy of ``step_seq`` that a step updates only when the
  session stops or every 32 steps (``step_queries.STEP_SEQ_MARK_EVERY``).

The table's fillfactor leaves a fifth of each page free for the new versions
(pages written from now on). The backfill gives every session with history
beyond its last compaction its exact mark, as if it had just stopped.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 02:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel

_FILLFACTOR = 80  # tables.SESSIONS_FILLFACTOR when this was written


def upgrade() -> None:
    op.add_column(
        "sessions",
        sa.Column("step_seq_mark", sa.Integer(), server_default="0", nullable=False),
    )
    op.execute("UPDATE sessions SET step_seq_mark = step_seq WHERE step_seq - compacted_to > 0")
    op.drop_index("ix_sessions_uncompacted", table_name="sessions")
    op.create_index(
        "ix_sessions_uncompacted", "sessions", [sa.text("(step_seq_mark - compacted_to)")]
    )
    op.drop_index(
        "ix_sessions_lease_expires_at",
        table_name="sessions",
        postgresql_where=sa.text("status = 'running'"),
    )
    op.execute(f"ALTER TABLE sessions SET (fillfactor = {_FILLFACTOR})")


def downgrade() -> None:
    op.execute("ALTER TABLE sessions RESET (fillfactor)")
    op.create_index(
        "ix_sessions_lease_expires_at",
        "sessions",
        ["lease_expires_at"],
        postgresql_where=sa.text("status = 'running'"),
    )
    op.drop_index("ix_sessions_uncompacted", table_name="sessions")
    op.create_index("ix_sessions_uncompacted", "sessions", [sa.text("(step_seq - compacted_to)")])
    op.drop_column("sessions", "step_seq_mark")
