"""Lineage events a receiver missed (wap_lineage_outbox, in the run store's database): kept as sent, to be sent
again (wapflow.pipeline.lineage.resend: `wap lineage resend`, and `wap watch` every few minutes).

A row is written when sending an event failed, and deleted once a later try is answered, or given up after
OUTBOX_KEEP (wapflow.pipeline.lineage.resend drops older rows). Delivery stays at
least once, as OpenLineage receivers expect (they key on run id and event type): a resend that was answered
after its row was read by another resend may send the event twice, never zero times.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from wapflow.runs.schema import METADATA, ensure_schema

outbox_table = sa.Table(
    "wap_lineage_outbox",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(256), nullable=False),
    sa.Column("event_type", sa.String(16), nullable=False),  # START, COMPLETE, FAIL, ABORT
    sa.Column("event_json", sa.Text, nullable=False),  # the event as it was to be sent
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("error", sa.Text),  # the last try's error, never with the URL or key
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_wap_lineage_outbox_created", "created_at"),
)


class LineageOutbox:
    """The lineage events waiting to be sent again."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        ensure_schema(engine)

    def add(self, *, run_id: str, event_type: str, event_json: str, error: str) -> None:
        row = {
            "run_id": run_id,
            "event_type": event_type,
            "event_json": event_json,
            "attempts": 1,
            "error": error[:1000],
            "created_at": datetime.now(UTC),
        }
        with self.engine.begin() as conn:
            conn.execute(outbox_table.insert().values(**row))

    def waiting(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        """The events missed since `since`, oldest first (a receiver gets a run's START before its end)."""
        t = outbox_table.c
        q = sa.select(outbox_table).where(t.created_at >= since).order_by(t.id).limit(limit)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q).all()]

    def sent(self, row_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(outbox_table.delete().where(outbox_table.c.id == row_id))

    def forget(self, before: datetime) -> int:
        """Drop the events missed before `before` (given up: a receiver down that long has been told by its
        operator, or was replaced); how many were dropped."""
        with self.engine.begin() as conn:
            return conn.execute(outbox_table.delete().where(outbox_table.c.created_at < before)).rowcount or 0

    def failed_again(self, row_id: int, error: str) -> None:
        t = outbox_table.c
        with self.engine.begin() as conn:
            conn.execute(
                outbox_table.update().where(t.id == row_id).values(attempts=t.attempts + 1, error=error[:1000])
            )
