"""Alerts (`[alerts]` in wap.toml): blocked and failed runs, exhausted retries, failed files, high quarantine
rates, kept branches and recoveries, sent to Slack or a JSON webhook.

Sent after a run's outcome is recorded, never before and never instead: `notify` does not raise, and a
sink that is down costs at most its timeout per attempt. Every delivery is recorded in the run store's
database (wapflow.runs.alerts), at most once per occurrence, event and sink.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from wapflow.alerts.deliver import Delivery, dispatch, resend
from wapflow.alerts.event import AlertEvent, commands_for, events_for_run, from_run
from wapflow.redact import redact
from wapflow.vocabulary import DELIVERY_SENT

if TYPE_CHECKING:
    import sqlalchemy as sa

    from wapflow.config import WapConfig
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline.result import RunResult
    from wapflow.runs.store import RunStore

__all__ = [
    "AlertEvent",
    "Delivery",
    "alert_run",
    "events_for_run",
    "from_run",
    "kept_branch_events",
    "notify",
    "resend_failed",
]


def _quiet(_: str) -> None:
    return None


def _secrets(cfg: WapConfig) -> list[str]:
    return [v for s in cfg.alerts.sinks.values() if (v := os.environ.get(s.url_env, "").strip())]


def notify(
    cfg: WapConfig,
    engine: sa.Engine,
    events: Sequence[AlertEvent],
    *,
    progress: Callable[[str], None] = _quiet,
) -> list[Delivery]:
    """Send each event to the sinks that want it; failures become warnings through `progress`, never
    exceptions."""
    if not cfg.alerts.sinks or not events:
        return []
    out: list[Delivery] = []
    for ev in events:
        try:
            out += dispatch(cfg.alerts, engine, ev)
        except Exception as e:  # noqa: BLE001 - an alert must never change, hide or delay a run's outcome
            text = redact(f"{type(e).__name__}: {e}", _secrets(cfg))
            progress(f"warning: alert {ev.event} of {ev.run_id or ev.key} not sent (a bug in wapflow): {text[:300]}")
    for d in out:
        if d.status == "failed":
            progress(
                f"warning: alert {d.event} to sink {d.sink} not delivered after {d.attempts} attempt(s): {d.error}"
            )
    return out


def resend_failed(
    cfg: WapConfig,
    engine: sa.Engine,
    within: timedelta,
    *,
    progress: Callable[[str], None] = _quiet,
) -> list[Delivery]:
    """Send again the deliveries that failed in the last `within` (wapflow.alerts.deliver.resend); what fails
    again becomes a warning through `progress`, never an exception."""
    if not cfg.alerts.sinks:
        return []
    try:
        out = resend(cfg.alerts, engine, datetime.now(UTC) - within)
    except Exception as e:  # noqa: BLE001 - as notify: alerts never stop what sends them
        progress(f"warning: failed alerts not sent again (a bug in wapflow): {redact(str(e), _secrets(cfg))[:300]}")
        return []
    for d in out:
        if d.status == DELIVERY_SENT:
            progress(f"alert {d.event} to sink {d.sink} sent on a later try")
        else:
            progress(f"warning: alert {d.event} to sink {d.sink} still not delivered: {d.error}")
    return out


def alert_run(lh: Lakehouse, res: RunResult, *, source: str | None = None) -> list[Delivery]:
    """After a run's outcome is recorded: blocked, failed (terminal) or a quarantine rate above the threshold."""
    cfg = lh.config
    if not cfg.alerts.sinks:
        return []
    events = events_for_run(res, quarantine_rate_above=cfg.alerts.quarantine_rate_above, source=source)
    return notify(cfg, lh.store.engine, events, progress=lh.progress)


def kept_branch_events(store: RunStore, days: float, *, now: datetime | None = None) -> list[AlertEvent]:
    """One event per branch kept for inspection (blocked or failed run, not discarded) for longer than `days`;
    the branch name is the occurrence, so each branch alerts once."""
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(days=days)
    seen: set[str] = set()
    events: list[AlertEvent] = []
    for rec in store.list(limit=100_000):
        if not (rec.branch_kept and rec.branch and rec.status in ("blocked", "failed")) or rec.branch in seen:
            continue
        started = rec.started_at if rec.started_at.tzinfo else rec.started_at.replace(tzinfo=UTC)
        if started > cutoff:
            continue
        seen.add(rec.branch)
        age = (now - started).days
        events.append(
            AlertEvent(
                event="branch_kept",
                table=rec.table_name,
                run_id=rec.run_id,
                status=rec.status,
                message=f"branch {rec.branch} of {rec.status} run {rec.run_id} kept for {age} day(s), "
                f"more than {days:g}: inspect it, then discard it",
                branch=rec.branch,
                commands=commands_for(rec.table_name, rec.run_id, rec.branch),
                key=f"branch:{rec.branch}",
            )
        )
    return events
