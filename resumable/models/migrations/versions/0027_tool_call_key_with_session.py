"""tool_execution_cache: the primary key (idempotency_key, session_id)

Issue 40, the plan past one primary (docs/scaling.md): a table distributed by
session id can only keep a unique index that holds the session id, and a
recorded call's claim inserts with ON CONFLICT on that index. A call's key is
derived from its session's id (``call_keys.idempotency_key``), so the pair is
as unique as the key alone was; the key stays the index's first column, so
every lookup by key alone uses it as before.

The new index is built under the table's lock: on a large table, run this
migration in a deploy window (``resumable db upgrade`` before the new
workers start).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07 01:30:00.000000
"""

from collections.abc import Sequence

import sqlmodel
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.drop_constraint(op.f("pk_tool_execution_cache"), "tool_execution_cache", type_="primary")
    op.create_primary_key(
        op.f("pk_tool_execution_cache"), "tool_execution_cache", ["idempotency_key", "session_id"]
    )


def downgrade() -> None:
    op.drop_constraint(op.f("pk_tool_execution_cache"), "tool_execution_cache", type_="primary")
    op.create_primary_key(
        op.f("pk_tool_execution_cache"), "tool_execution_cache", ["idempotency_key"]
    )
