"""The alert log: one row per (occurrence, event, sink) in the run store's database.

A row is claimed ('pending') before anything is sent and updated afterwards ('sent' or 'failed'), and
the UNIQUE constraint lets exactly one claim win: a replayed durable step, a resumed run or two workers
finishing the same batch never send the same alert twice. A process killed between the claim and the
update leaves 'pending': that alert was perhaps sent, perhaps not, and is not sent again (at most once). A
'failed' row (the sink answered an error, or nothing) keeps its alert and is sent again by a resend that takes
it back to 'pending' first (`retake`: one resend wins).

No row holds a URL: sinks are named by their wap.toml name, errors are written without the URL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from wapflow.runs.schema import METADATA, ensure_schema
from wapflow.vocabulary import DELIVERY_FAILED, DELIVERY_PENDING, DELIVERY_SENT

alerts_table = sa.Table(
    "wap_alerts",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    # What makes an alert one occurrence: the run id, or run id + claim for a batch of the outer loop (a
    # `wap retry` is a new occurrence), or the branch name for `branch_kept`.
    sa.Column("key", sa.String(256), nullable=False),
    sa.Column("run_id", sa.String(256)),
    sa.Column("event", sa.String(32), nullable=False),
    sa.Column("sink", sa.String(64), nullable=False),
    sa.Column("table_name", sa.String(512)),
    sa.Column("status", sa.String(16), nullable=False),  # pending / sent / failed
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("http_status", sa.Integer),
    sa.Column("error", sa.Text),  # why it was not sent, never with the URL
    sa.Column("message", sa.Text),  # the alert's one-line text
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("sent_at", sa.DateTime(timezone=True)),
    # The alert itself (AlertEvent.to_dict as JSON; migration 0007), so a delivery that failed is sent again
    # as it was (`wap alerts resend`, `wap watch`). Null in rows written before.
    sa.Column("event_json", sa.Text),
    sa.UniqueConstraint("key", "event", "sink", name="uq_wap_alerts_once"),
    sa.Index("ix_wap_alerts_created", "created_at"),
)

COLUMNS = (
    "id",
    "run_id",
    "event",
    "sink",
    "table_name",
    "status",
    "attempts",
    "http_status",
    "error",
    "message",
    "created_at",
    "sent_at",
)


class AlertLog:
    """Claims and outcomes of alert deliveries, beside the runs and the ledger."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        ensure_schema(engine)

    def claim(
        self,
        *,
        key: str,
        run_id: str | None,
        event: str,
        sink: str,
        table: str | None,
        message: str,
        event_json: str | None = None,
    ) -> int | None:
        """The row's id if this process is the one to send it; None if it was claimed before (sent, failed,
        or being sent)."""
        row = {
            "event_json": event_json,
            "key": key,
            "run_id": run_id,
            "event": event,
            "sink": sink,
            "table_name": table,
            "status": DELIVERY_PENDING,
            "attempts": 0,
            "message": message[:1000],
            "created_at": datetime.now(UTC),
        }
        try:
            with self.engine.begin() as conn:
                res = conn.execute(alerts_table.insert().values(**row))
                pk = res.inserted_primary_key
                return int(pk[0]) if pk else None
        except sa.exc.IntegrityError:
            return None

    def seen(self, *, key: str, event: str) -> bool:
        """Whether this occurrence of the event was claimed for any sink already (a repeated alert's cheap test
        before building it: what it carries may cost a Spark job)."""
        t = alerts_table.c
        with self.engine.connect() as conn:
            return conn.execute(sa.select(t.id).where(t.key == key, t.event == event).limit(1)).first() is not None

    def finish(self, row_id: int, *, status: str, attempts: int, http_status: int | None, error: str | None) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                alerts_table.update()
                .where(alerts_table.c.id == row_id)
                .values(
                    status=status,
                    attempts=attempts,
                    http_status=http_status,
                    error=error,
                    sent_at=datetime.now(UTC) if status == DELIVERY_SENT else None,
                )
            )

    def failed_since(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        """Deliveries that failed (the sink answered an error, or nothing) since `since` and carry their alert,
        oldest first: what `resend` sends again. A 'pending' row is never among them (perhaps sent: at most
        once)."""
        t = alerts_table.c
        q = (
            sa.select(t.id, t.sink, t.event, t.attempts, t.http_status, t.error, t.event_json)
            .where(t.status == DELIVERY_FAILED, t.event_json.is_not(None), t.created_at >= since)
            .order_by(t.id)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q).all()]

    def retake(self, row_id: int) -> bool:
        """Claim a failed delivery to send it again: True for the one process whose update moved it back to
        'pending' (two resends at once send it once)."""
        t = alerts_table.c
        with self.engine.begin() as conn:
            done = conn.execute(
                alerts_table.update().where(t.id == row_id, t.status == DELIVERY_FAILED).values(status=DELIVERY_PENDING)
            )
            return done.rowcount == 1

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest deliveries first, as plain rows."""
        q = sa.select(*(alerts_table.c[c] for c in COLUMNS)).order_by(alerts_table.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q).all()]
