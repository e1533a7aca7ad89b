"""Lineage events a receiver missed (wap_lineage_outbox), kept to be sent again.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "wap_lineage_outbox" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "wap_lineage_outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(256), nullable=False),
        sa.Column("event_type", sa.String(16), nullable=False),
        sa.Column("event_json", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_wap_lineage_outbox_created", "wap_lineage_outbox", ["created_at"])


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
