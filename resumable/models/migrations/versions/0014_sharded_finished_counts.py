"""sharded finished-session counts

``finished_session_counts`` had one row per agent and status, and every
session that finished upserted its agent's row: finishing sessions waited for
each other's row lock until the one before committed, so a burst of sessions
completing together ran one commit at a time. The counts now have a shard
column (the connection's backend pid modulo 64), each transaction adds to its
own connection's row, and a scrape sums the shards.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 11:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

from resumable.models.metrics_queries import (
    COUNT_FINISHED_FUNCTION,
    UNSHARDED_COUNT_FINISHED_FUNCTION,
)

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel

_PK = "pk_finished_session_counts"


def upgrade() -> None:
    # No session finishes between the new key and the new function.
    op.execute("LOCK TABLE sessions IN SHARE ROW EXCLUSIVE MODE")
    op.add_column(
        "finished_session_counts",
        sa.Column("shard", sa.SmallInteger(), server_default="0", nullable=False),
    )
    op.drop_constraint(_PK, "finished_session_counts", type_="primary")
    op.create_primary_key(_PK, "finished_session_counts", ["agent", "status", "shard"])
    op.execute(COUNT_FINISHED_FUNCTION)


def downgrade() -> None:
    op.execute("LOCK TABLE sessions IN SHARE ROW EXCLUSIVE MODE")
    op.execute(
        """
        CREATE TEMPORARY TABLE finished_totals ON COMMIT DROP AS
        SELECT agent, status, sum(n)::bigint AS n FROM finished_session_counts
        GROUP BY agent, status
        """
    )
    op.execute("DELETE FROM finished_session_counts")
    op.drop_constraint(_PK, "finished_session_counts", type_="primary")
    op.drop_column("finished_session_counts", "shard")
    op.create_primary_key(_PK, "finished_session_counts", ["agent", "status"])
    op.execute(
        "INSERT INTO finished_session_counts (agent, status, n) SELECT * FROM finished_totals"
    )
    op.execute(UNSHARDED_COUNT_FINISHED_FUNCTION)
