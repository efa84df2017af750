"""alerts a parent session handled: cancelled

A child session that fails for good while its parent waits on it with
``on_failure="inform"`` is reported to the parent, which handles it; its
dead letter is then discarded by the parent and its alert must not page
anyone. Such an alert ends ``cancelled`` (a status alerts did not have), and
the parent's wake finds it among the pending alerts by its session.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 04:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel

_BEFORE = "'pending','sent','failed'"
_AFTER = _BEFORE + ",'cancelled'"
_PENDING = sa.text("status = 'pending'")


def _status_check(values: str) -> None:
    op.drop_constraint(op.f("ck_alerts_status"), "alerts", type_="check")
    op.create_check_constraint(op.f("ck_alerts_status"), "alerts", f"status IN ({values})")


def upgrade() -> None:
    _status_check(_AFTER)
    op.create_index(
        "ix_alerts_pending_session", "alerts", ["session_id"], postgresql_where=_PENDING
    )


def downgrade() -> None:
    op.drop_index("ix_alerts_pending_session", table_name="alerts", postgresql_where=_PENDING)
    # An alert that was never to be sent, as one that gave up: never sent.
    op.execute("UPDATE alerts SET status = 'failed' WHERE status = 'cancelled'")
    _status_check(_BEFORE)
