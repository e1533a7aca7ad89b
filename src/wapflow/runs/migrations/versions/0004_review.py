"""Review of runs held before publish: who approved or rejected a run awaiting review, why and when (wap_runs).

Revision ID: 0004
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("wap_runs")}
    for column in (
        sa.Column("review", sa.String(16)),
        sa.Column("review_by", sa.String(256)),
        sa.Column("review_reason", sa.Text),
        sa.Column("reviewed_at", sa.DateTime(timezone=True)),
    ):
        if column.name not in have:
            op.add_column("wap_runs", column)


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
