"""agent versions

Agents declare a code version. A session records the version it started on
(``started_version``, what ``ctx.version`` answers) and the version that
serves it now (``agent_version``: the same, until a newer version migrates
it); workers announce the version of each agent they load and the older
versions they take over; ``agent_versions`` keeps every announced version
with a fingerprint of its step, check and compensation names.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 04:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Keep sqlmodel imported: autogenerate may emit sqlmodel.sql.sqltypes.AutoString.
_ = sqlmodel


def upgrade() -> None:
    # Existing sessions were started by unversioned code: version 0.
    for column in ("agent_version", "started_version"):
        op.add_column(
            "sessions",
            sa.Column(column, sa.Integer(), server_default=sa.text("0"), nullable=False),
        )
    op.add_column(
        "workers",
        sa.Column(
            "versions",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
    )
    op.add_column(
        "workers",
        sa.Column(
            "takes_over",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )
    op.create_table(
        "agent_versions",
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("steps", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("checks", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("compensations", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("takes_over", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "first_announced_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "last_announced_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("agent", "version", name=op.f("pk_agent_versions")),
    )


def downgrade() -> None:
    op.drop_table("agent_versions")
    op.drop_column("workers", "takes_over")
    op.drop_column("workers", "versions")
    op.drop_column("sessions", "started_version")
    op.drop_column("sessions", "agent_version")
