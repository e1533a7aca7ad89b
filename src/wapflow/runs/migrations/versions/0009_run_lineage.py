"""What a published run's rows carry on a v3 table (wap_runs.lineage): `wap revert` finds them after expiry.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("wap_runs")}
    if "lineage" not in have:
        op.add_column("wap_runs", sa.Column("lineage", sa.Text))


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
