"""The alert each delivery carries (wap_alerts.event_json): a delivery that failed can be sent again.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("wap_alerts")}
    if "event_json" not in have:
        op.add_column("wap_alerts", sa.Column("event_json", sa.Text))


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
