"""Rows of `wap alerts list` and the dashboard's alerts panel, read from the run store alone (no Spark).

Each row is one delivery of one alert to one sink: status `sent`, `failed` (with why, never the URL) or
`pending` (being sent, or its process died while sending: at most once means it is not sent again).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from wapflow.runs.alerts import AlertLog
from wapflow.runs.store import RunStore


def _plain(v: Any) -> Any:
    return v.isoformat(timespec="seconds") if isinstance(v, datetime) else v


def recent_alerts(store: RunStore, limit: int = 50) -> list[dict[str, Any]]:
    """The newest deliveries first: id, run_id, event, sink, table_name, status, attempts, http_status, error,
    message, created_at, sent_at (ISO 8601 strings)."""
    return [{k: _plain(v) for k, v in row.items()} for row in AlertLog(store.engine).recent(limit)]


def failed_alerts(store: RunStore, limit: int = 50) -> list[dict[str, Any]]:
    """Deliveries that did not reach their sink, newest first."""
    return [r for r in recent_alerts(store, limit=limit * 4) if r["status"] == "failed"][:limit]
