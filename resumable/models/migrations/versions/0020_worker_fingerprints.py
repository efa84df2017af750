"""workers: the fingerprint of each agent a worker loads

Two live workers that load an unversioned agent from different code
alternate that code between a session's steps. Each worker now records the
fingerprint of each agent it loads (the hash of its step, alias, check and
compensation names, ``Agent.fingerprint``), so a starting worker can say
when the live ones disagree, and the console can show it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    op.add_column(
        "workers",
        sa.Column("fingerprints", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    )


def downgrade() -> None:
    op.drop_column("workers", "fingerprints")
