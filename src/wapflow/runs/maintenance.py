"""The maintenance log: one row per maintenance action on one table (`wap maintain`, `wap watch`'s schedule).

In the run store's database, beside runs and the ledger, so what maintenance did to a table (files
compacted, snapshots expired, branches dropped) and what failed is read back like a run. An action that is
`running` records its process: when that process is gone (SIGKILL, OOM) the row reads `interrupted`, and
the next `wap maintain` simply does the work again (every action is idempotent).

A table of its own (`wap_maintenance`, added by migration 0002 of wapflow/runs/migrations).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from wapflow.runs.schema import METADATA, ensure_schema
from wapflow.runs.store import current_owner, owner_alive, upsert
from wapflow.vocabulary import INTERRUPTED

maintenance_table = sa.Table(
    "wap_maintenance",
    METADATA,
    sa.Column("id", sa.String(128), primary_key=True),  # <pass id>.<n>: one action of one pass
    sa.Column("pass_id", sa.String(64), nullable=False, index=True),  # one `wap maintain` (or a watch tick)
    sa.Column("table_name", sa.String(512), nullable=False, index=True),
    sa.Column("action", sa.String(32), nullable=False),  # compact | rewrite_manifests | expire_snapshots | ...
    sa.Column("status", sa.String(16), nullable=False),  # running | done | failed | skipped
    sa.Column("figures", sa.Text, nullable=False, default="{}"),  # JSON: files before/after, bytes, snapshots...
    sa.Column("error", sa.Text),  # JSON of the WapError (kind, message, hint, retryable)
    sa.Column("owner", sa.Text),  # JSON {host, pid, start} while running
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
)


@dataclass
class MaintenanceRecord:
    id: str
    pass_id: str
    table_name: str
    action: str
    status: str
    figures: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    owner: dict[str, Any] | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None

    @property
    def shown_status(self) -> str:
        """`interrupted` for an action whose process died while running it."""
        return INTERRUPTED if self.status == "running" and owner_alive(self.owner) is False else self.status

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pass_id": self.pass_id,
            "table": self.table_name,
            "action": self.action,
            "status": self.shown_status,
            "figures": self.figures,
            "error": self.error,
            "started_at": self.started_at.isoformat(timespec="seconds"),
            "finished_at": self.finished_at.isoformat(timespec="seconds") if self.finished_at else None,
        }

    def to_row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pass_id": self.pass_id,
            "table_name": self.table_name,
            "action": self.action,
            "status": self.status,
            "figures": json.dumps(self.figures, default=str),
            "error": json.dumps(self.error, default=str) if self.error else None,
            "owner": json.dumps(self.owner) if self.owner else None,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> MaintenanceRecord:
        m = row._mapping
        return cls(
            id=m["id"],
            pass_id=m["pass_id"],
            table_name=m["table_name"],
            action=m["action"],
            status=m["status"],
            figures=json.loads(m["figures"] or "{}"),
            error=json.loads(m["error"]) if m["error"] else None,
            owner=json.loads(m["owner"]) if m["owner"] else None,
            started_at=m["started_at"],
            finished_at=m["finished_at"],
        )


class MaintenanceLog:
    """Maintenance actions in the run store's database (any SQLAlchemy engine the store uses)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        ensure_schema(engine)

    def start(self, pass_id: str, n: int, table: str, action: str) -> MaintenanceRecord:
        rec = MaintenanceRecord(f"{pass_id}.{n}", pass_id, table, action, "running", owner=current_owner())
        with self.engine.begin() as conn:
            # A pass replayed under its id (a durable workflow resumed after a crash) takes its rows over.
            upsert(conn, maintenance_table, rec.to_row(), "id")
        return rec

    def finish(
        self,
        rec: MaintenanceRecord,
        status: str,
        figures: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> MaintenanceRecord:
        rec.status = status
        rec.figures = dict(figures or {})
        rec.error = error
        rec.owner = None
        rec.finished_at = datetime.now(UTC)
        with self.engine.begin() as conn:
            conn.execute(maintenance_table.update().where(maintenance_table.c.id == rec.id).values(**rec.to_row()))
        return rec

    def list(
        self, table: str | None = None, *, pass_id: str | None = None, limit: int = 100
    ) -> list[MaintenanceRecord]:
        """Newest first."""
        q = sa.select(maintenance_table).order_by(maintenance_table.c.started_at.desc(), maintenance_table.c.id.desc())
        if table:
            q = q.where(maintenance_table.c.table_name == table)
        if pass_id:
            q = q.where(maintenance_table.c.pass_id == pass_id)
        with self.engine.connect() as conn:
            return [MaintenanceRecord.from_row(r) for r in conn.execute(q.limit(limit)).all()]
