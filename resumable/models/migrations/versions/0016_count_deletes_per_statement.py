"""finished sessions counted down once per delete statement

Retention deletes finished sessions in batches of up to 100,000 rows. The
per-row delete trigger upserted the same ``finished_session_counts`` row once
for every session of an agent. Inside one transaction, each of those upserts
walks every version of that row the transaction has already written, so a
batch cost time quadratic in its size: 16,000 sessions of one agent took
1.6 s, and the largest batch allowed would take about a minute. A
statement-level trigger with a transition table now counts the whole batch
down with one upsert per agent and status. Inserts and updates keep their
per-row triggers (see metrics_queries).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 06:30:00.000000
"""

from collections.abc import Sequence

import sqlmodel
from alembic import op

from resumable.models.metrics_queries import (
    COUNT_FINISHED_DELETED_FUNCTION,
    ROW_COUNT_FINISHED_TRIGGERS,
    STATEMENT_DELETE_TRIGGER,
)

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel

_ROW_DELETE_TRIGGER = ROW_COUNT_FINISHED_TRIGGERS[2]


def upgrade() -> None:
    # No session is deleted between the old trigger and the new one.
    op.execute("LOCK TABLE sessions IN SHARE ROW EXCLUSIVE MODE")
    op.execute("DROP TRIGGER sessions_count_finished_delete ON sessions")
    op.execute(COUNT_FINISHED_DELETED_FUNCTION)
    op.execute(STATEMENT_DELETE_TRIGGER)


def downgrade() -> None:
    op.execute("LOCK TABLE sessions IN SHARE ROW EXCLUSIVE MODE")
    op.execute("DROP TRIGGER sessions_count_finished_delete ON sessions")
    op.execute("DROP FUNCTION resumable_count_finished_deleted()")
    op.execute(_ROW_DELETE_TRIGGER)
