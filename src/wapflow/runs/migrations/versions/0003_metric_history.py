"""The metric history (wap_metrics): a table's batch metrics per audited run, for anomaly checks and `wap metrics`.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "wap_metrics",
        sa.Column("run_id", sa.String(256), primary_key=True),
        sa.Column("table_name", sa.String(512), primary_key=True),
        sa.Column("metric", sa.String(64), primary_key=True),
        sa.Column("column_name", sa.String(256), primary_key=True),
        sa.Column("value", sa.Float),
        sa.Column("text", sa.Text),
        sa.Column("run_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_wap_metrics_series", "wap_metrics", ["table_name", "metric", "column_name", "run_at"])


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
