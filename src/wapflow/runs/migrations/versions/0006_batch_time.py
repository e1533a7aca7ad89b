"""The batch's own time beside its metrics (wap_metrics.batch_at): weekly seasonality keyed on the data's day.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("wap_metrics")}
    if "batch_at" not in have:
        op.add_column("wap_metrics", sa.Column("batch_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
