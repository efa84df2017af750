"""resting_session_counts: suspended and blocked sessions counted by triggers

A /metrics scrape counted every session not finished from the partial index
``ix_sessions_live``, and agents waiting on people leave hundreds of thousands
suspended: at 200,000 the scrape took 28 ms instead of 1.8. Sessions at rest
(suspended, blocked) are now counted as finished ones are, in sharded rows
kept by triggers (one upsert when a session comes to rest, one when it
leaves), and the index holds only the active ones (``ix_sessions_active``).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 13:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

from resumable.models.metrics_queries import (
    COUNT_RESTING_DELETED_FUNCTION,
    COUNT_RESTING_FUNCTION,
    COUNT_RESTING_TRIGGERS,
)

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel

# As this revision wrote them.
_TERMINAL = "'completed','failed','cancelled'"
_RESTING = "'suspended','blocked'"


def upgrade() -> None:
    op.create_table(
        "resting_session_counts",
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("n", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("agent", "status", "shard", name=op.f("pk_resting_session_counts")),
    )
    op.execute(COUNT_RESTING_FUNCTION)
    op.execute(COUNT_RESTING_DELETED_FUNCTION)
    # The counts of the sessions at rest now; the triggers keep them from here
    # (no session changes status between the two: the lock).
    op.execute("LOCK TABLE sessions IN SHARE ROW EXCLUSIVE MODE")
    for trigger in COUNT_RESTING_TRIGGERS:
        op.execute(trigger)
    op.execute(
        f"""INSERT INTO resting_session_counts (agent, status, shard, n)
        SELECT agent, status, 0, count(*) FROM sessions WHERE status IN ({_RESTING})
        GROUP BY agent, status"""
    )
    op.create_index(
        "ix_sessions_active",
        "sessions",
        ["agent", "status"],
        unique=False,
        postgresql_where=sa.text(f"status NOT IN ({_TERMINAL},{_RESTING})"),
    )
    op.drop_index("ix_sessions_live", table_name="sessions")


def downgrade() -> None:
    op.create_index(
        "ix_sessions_live",
        "sessions",
        ["agent", "status"],
        unique=False,
        postgresql_where=sa.text(f"status NOT IN ({_TERMINAL})"),
    )
    op.drop_index("ix_sessions_active", table_name="sessions")
    for name in ("insert", "update", "delete"):
        op.execute(f"DROP TRIGGER sessions_count_resting_{name} ON sessions")
    op.execute("DROP FUNCTION resumable_count_resting()")
    op.execute("DROP FUNCTION resumable_count_resting_deleted()")
    op.drop_table("resting_session_counts")
