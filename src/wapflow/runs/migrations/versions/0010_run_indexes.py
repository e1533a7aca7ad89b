"""Indexes that keep the run store's listings flat after a year of runs (issue 60; benchmarks/bench_store.py):
`wap runs` newest first, a table's runs newest first, a branch's runs, a table's running runs.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# Declared on wapflow.runs.store.runs_table too (the same names and columns).
INDEXES = [
    ("ix_wap_runs_started_at", ["started_at"]),
    ("ix_wap_runs_table_started", ["table_name", "started_at"]),
    ("ix_wap_runs_branch", ["branch"]),
    ("ix_wap_runs_table_status", ["table_name", "status"]),
]


def upgrade() -> None:
    have = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("wap_runs")}
    for name, columns in INDEXES:
        if name not in have:
            op.create_index(name, "wap_runs", columns)


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
