"""Baseline: the run store (wap_runs), the file ledger (wap_files) and alert deliveries (wap_alerts) as wapflow
had them before migrations existed. A store written by such a wapflow (no version table yet) is adopted: the
tables that exist stay with their rows, columns added in later releases are added, VARCHARs PostgreSQL held
shorter are widened, and what is missing is created.

Revision ID: 0001
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def _runs() -> list[sa.Column[object]]:
    return [
        sa.Column("run_id", sa.String(256), primary_key=True),
        sa.Column("table_name", sa.String(512), nullable=False),
        sa.Column("branch", sa.String(256)),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("files", sa.Text, nullable=False),
        sa.Column("rows_written", sa.BigInteger),
        sa.Column("base_snapshot_id", sa.BigInteger),
        sa.Column("branch_snapshot_id", sa.BigInteger),
        sa.Column("snapshot_id", sa.BigInteger),
        sa.Column("checks", sa.Text, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("timings", sa.Text, nullable=False),
        sa.Column("branch_kept", sa.Boolean),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("finished_at", TZ),
        sa.Column("file_ids", sa.Text),
        sa.Column("owner", sa.Text),
        sa.Column("reverted", sa.Text),
    ]


def _files() -> list[sa.Column[object]]:
    return [
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("source", sa.String(128), nullable=False),
        sa.Column("uri", sa.Text, nullable=False),
        sa.Column("size", sa.BigInteger),
        sa.Column("version", sa.String(256)),
        sa.Column("modified", TZ),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("run_id", sa.String(256)),
        sa.Column("snapshot_id", sa.BigInteger),
        sa.Column("error", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("claims", sa.Integer, nullable=False),
        sa.Column("batch_limit", sa.Integer),
        sa.Column("reason", sa.Text),
        sa.Column("owner", sa.Text),
        sa.Column("first_seen", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
    ]


def _alerts() -> list[sa.Column[object] | sa.Constraint]:
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(256), nullable=False),
        sa.Column("run_id", sa.String(256)),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("sink", sa.String(64), nullable=False),
        sa.Column("table_name", sa.String(512)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("http_status", sa.Integer),
        sa.Column("error", sa.Text),
        sa.Column("message", sa.Text),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("sent_at", TZ),
        sa.UniqueConstraint("key", "event", "sink", name="uq_wap_alerts_once"),
    ]


TABLES: dict[str, Callable[[], list[Any]]] = {"wap_runs": _runs, "wap_files": _files, "wap_alerts": _alerts}
INDEXES: dict[str, list[tuple[str, list[str]]]] = {
    "wap_runs": [("ix_wap_runs_table_name", ["table_name"])],
    "wap_files": [("ix_wap_files_source_state", ["source", "state"]), ("ix_wap_files_run_id", ["run_id"])],
    "wap_alerts": [("ix_wap_alerts_created", ["created_at"])],
}


def upgrade() -> None:
    bind = op.get_bind()
    have = set(sa.inspect(bind).get_table_names())
    for name, parts in TABLES.items():
        items = parts()
        if name not in have:
            op.create_table(name, *items)
            for ix, cols in INDEXES[name]:
                op.create_index(ix, name, cols)
            continue
        # A table from before migrations: the columns later releases added, and VARCHARs widened.
        existing = {c["name"]: c["type"] for c in sa.inspect(bind).get_columns(name)}
        columns = [i for i in items if isinstance(i, sa.Column)]
        with op.batch_alter_table(name) as batch:
            for col in columns:
                if col.name not in existing:
                    batch.add_column(sa.Column(col.name, col.type, nullable=True))
                    continue
                length = getattr(col.type, "length", None)
                old = getattr(existing[col.name], "length", None)
                widen = isinstance(col.type, sa.String) and bool(length and old and old < length)
                if bind.dialect.name == "postgresql" and widen:
                    batch.alter_column(col.name, type_=sa.String(length), existing_type=existing[col.name])


def downgrade() -> None:
    raise NotImplementedError("wapflow's store is only upgraded; restore a backup to go back")
