"""The run store: one row per run in SQLite beside the catalog, or any SQLAlchemy database."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa

_meta = sa.MetaData()
runs_table = sa.Table(
    "wap_runs",
    _meta,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("table_name", sa.String(512), nullable=False, index=True),
    sa.Column("branch", sa.String(256)),
    sa.Column("status", sa.String(32), nullable=False),  # running / published / blocked / failed / discarded
    sa.Column("files", sa.Text, nullable=False, default="[]"),
    sa.Column("rows_written", sa.BigInteger),
    sa.Column("base_snapshot_id", sa.BigInteger),
    sa.Column("branch_snapshot_id", sa.BigInteger),
    sa.Column("snapshot_id", sa.BigInteger),
    sa.Column("checks", sa.Text, nullable=False, default="[]"),
    sa.Column("error", sa.Text),
    sa.Column("timings", sa.Text, nullable=False, default="{}"),
    sa.Column("branch_kept", sa.Boolean, default=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
)


@dataclass
class RunRecord:
    run_id: str
    table_name: str
    status: str
    branch: str | None = None
    files: list[str] = field(default_factory=list)
    rows_written: int | None = None
    base_snapshot_id: int | None = None
    branch_snapshot_id: int | None = None
    snapshot_id: int | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    branch_kept: bool = False
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    finished_at: datetime | None = None

    def to_row(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "table_name": self.table_name,
            "branch": self.branch,
            "status": self.status,
            "files": json.dumps(self.files),
            "rows_written": self.rows_written,
            "base_snapshot_id": self.base_snapshot_id,
            "branch_snapshot_id": self.branch_snapshot_id,
            "snapshot_id": self.snapshot_id,
            "checks": json.dumps(self.checks, default=str),
            "error": json.dumps(self.error, default=str) if self.error else None,
            "timings": json.dumps(self.timings),
            "branch_kept": self.branch_kept,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }

    @classmethod
    def from_row(cls, row: Any) -> "RunRecord":
        m = row._mapping
        return cls(
            run_id=m["run_id"],
            table_name=m["table_name"],
            status=m["status"],
            branch=m["branch"],
            files=json.loads(m["files"] or "[]"),
            rows_written=m["rows_written"],
            base_snapshot_id=m["base_snapshot_id"],
            branch_snapshot_id=m["branch_snapshot_id"],
            snapshot_id=m["snapshot_id"],
            checks=json.loads(m["checks"] or "[]"),
            error=json.loads(m["error"]) if m["error"] else None,
            timings=json.loads(m["timings"] or "{}"),
            branch_kept=bool(m["branch_kept"]),
            started_at=m["started_at"],
            finished_at=m["finished_at"],
        )


class RunStore:
    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        self.engine = sa.create_engine(url, future=True)
        if self.engine.dialect.name == "sqlite":

            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_conn: Any, _rec: Any) -> None:  # concurrent wap processes share the file
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA busy_timeout=30000")
                cur.close()

        _meta.create_all(self.engine)

    def save(self, rec: RunRecord) -> None:
        row = rec.to_row()
        with self.engine.begin() as conn:
            exists = conn.execute(sa.select(runs_table.c.run_id).where(runs_table.c.run_id == rec.run_id)).first()
            if exists:
                conn.execute(runs_table.update().where(runs_table.c.run_id == rec.run_id).values(**row))
            else:
                conn.execute(runs_table.insert().values(**row))

    def get(self, run_id: str) -> RunRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(runs_table).where(runs_table.c.run_id == run_id)).first()
        return RunRecord.from_row(row) if row else None

    def by_branch(self, branch: str) -> list[RunRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(runs_table).where(runs_table.c.branch == branch).order_by(runs_table.c.started_at.desc())
            ).all()
        return [RunRecord.from_row(r) for r in rows]

    def list(self, table: str | None = None, limit: int = 100) -> list[RunRecord]:
        q = sa.select(runs_table).order_by(runs_table.c.started_at.desc()).limit(limit)
        if table:
            q = q.where(runs_table.c.table_name == table)
        with self.engine.connect() as conn:
            return [RunRecord.from_row(r) for r in conn.execute(q).all()]

    def close(self) -> None:
        self.engine.dispose()
