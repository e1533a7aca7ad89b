"""The multi-table run a table's run belongs to (wap_runs.group_id): approved, rejected and diffed as one.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("wap_runs")}
    if "group_id" not in have:
        op.add_column("wap_runs", sa.Column("group_id", sa.String(256)))
    indexes = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("wap_runs")}
    if "ix_wap_runs_group_id" not in indexes:
        op.create_index("ix_wap_runs_group_id", "wap_runs", ["group_id"])


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
