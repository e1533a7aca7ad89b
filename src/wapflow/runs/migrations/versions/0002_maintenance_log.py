"""The maintenance log (wap_maintenance): one row per action of `wap maintain` or a watch's schedule.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "wap_maintenance" in sa.inspect(op.get_bind()).get_table_names():
        return  # made by a development build that created it without a migration
    op.create_table(
        "wap_maintenance",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("pass_id", sa.String(64), nullable=False),
        sa.Column("table_name", sa.String(512), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("figures", sa.Text, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("owner", sa.Text),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_wap_maintenance_pass_id", "wap_maintenance", ["pass_id"])
    op.create_index("ix_wap_maintenance_table_name", "wap_maintenance", ["table_name"])


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
