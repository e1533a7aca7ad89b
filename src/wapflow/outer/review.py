"""Runs held for review, seen from outside a run: the alert that asks a person to decide, and `review_timeout`.

The alert (`awaiting_review`) is built here, where both the alerts and the service layer are within reach: it
carries what publishing would change (service.diff.summary: one Spark job over main's metadata, so it is read
only when a sink wants the event, and never allowed to change the run's outcome).

A table's `review_timeout` bounds how long a run may wait. `expire_reviews` looks at every run awaiting review:
past its timeout it is rejected (on_review_timeout = "reject": by "wapflow", through service.review.reject, as
`wap reject` does) or alerted again, once per timeout period (on_review_timeout = "alert": the alert log's key
names the period, so a second look in the same period sends nothing). `wap watch` calls it on every tick (one
query of the run store while nothing is due), `wap expire-reviews` once.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypedDict

from wapflow.alerts import AlertEvent, notify
from wapflow.alerts.event import held_for_review, review_commands, review_expired
from wapflow.errors import AlreadyDecided, WapError
from wapflow.runs.alerts import AlertLog
from wapflow.runs.store import RunRecord
from wapflow.service.review import age_words, awaiting_runs, overdue, timed_out_reason
from wapflow.service.runs import AWAITING_REVIEW
from wapflow.vocabulary import REVIEW_EVENT, REVIEW_EXPIRED_EVENT

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.service.diff import SummaryDoc

EVENT = REVIEW_EVENT
EXPIRED = REVIEW_EXPIRED_EVENT  # the alert after on_review_timeout = "reject" rejected a run
TIMEOUT_BY = "wapflow"  # who rejects a run that waited too long (the run store's review_by)


def wanted(lh: Lakehouse) -> bool:
    """Whether any alert sink wants `awaiting_review` (else nothing is read to build it)."""
    return any(EVENT in s.events for s in lh.config.alerts.sinks.values())


def diff_summary(lh: Lakehouse, run_id: str) -> SummaryDoc | None:
    """What publishing the run would change, for an alert; None (and a warning) when it cannot be read."""
    from wapflow.service.diff import diff, summary

    try:
        return summary(diff(lh, run_id))
    except Exception as e:  # noqa: BLE001 - an alert's evidence must never change, hide or delay a run's outcome
        text = e.message if isinstance(e, WapError) else f"{type(e).__name__}: {e}"
        lh.progress(f"warning: the diff of run {run_id} for its review alert was not read: {text[:300]}")
        return None


def held_event(
    lh: Lakehouse, rec: RunRecord, *, source: str | None = None, key: str | None = None, message: str | None = None
) -> AlertEvent:
    """The `awaiting_review` alert of a held run, with its diff summary."""
    url = lh.config.alerts.dashboard_url
    summary = diff_summary(lh, rec.run_id)
    return held_for_review(rec, summary, source=source, key=key, message=message, dashboard_url=url)


def _alert_expired(lh: Lakehouse, run_id: str, message: str) -> None:
    """A timeout's rejection told to the sinks that want `review_expired`. Never raises (notify does not)."""
    if not any(EXPIRED in s.events for s in lh.config.alerts.sinks.values()):
        return
    rec = lh.store.get(run_id)
    if rec is not None:
        notify(lh.config, lh.store.engine, [review_expired(rec, message)], progress=lh.progress)


def alert_held(lh: Lakehouse, run_id: str, *, source: str | None = None) -> None:
    """After a run was held (its outcome recorded): ask the sinks that want it for a decision. Never raises. A
    multi-table run's id: one alert for the group, its commands naming the group (decided as a whole)."""
    if not wanted(lh):
        return
    rec = lh.store.get(run_id)
    if rec is None:
        members = lh.store.group(run_id)
        if not members or any(m.status != AWAITING_REVIEW for m in members):
            return
        tables = ", ".join(m.table_name for m in members)
        ev = held_event(
            lh,
            members[0],
            source=source,
            key=run_id,
            message=f"run {run_id} of {tables} passed its audit and awaits review; no main changes until someone "
            "approves it (every table is published together)",
        )
        ev.run_id, ev.table, ev.commands = run_id, tables, review_commands(run_id)
        notify(lh.config, lh.store.engine, [ev], progress=lh.progress)
        return
    if rec.status != AWAITING_REVIEW:
        return
    notify(lh.config, lh.store.engine, [held_event(lh, rec, source=source)], progress=lh.progress)


class ExpiryDoc(TypedDict):
    """One run past its review_timeout and what was done (`wap expire-reviews --json`)."""

    run_id: str
    table: str
    waited: str  # e.g. "2d 3h"
    review_timeout: str
    # rejected | alerted | alerted before (this period) | no sink (wants awaiting_review) | decided meanwhile |
    # would reject | would alert (dry run)
    action: str
    message: str


def expire_reviews(
    lh: Lakehouse,
    *,
    tables: Collection[str] | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
) -> list[ExpiryDoc]:
    """Apply each table's on_review_timeout to its runs awaiting review past review_timeout. `now`: the clock
    (tests move it instead of waiting); `dry_run`: only say what would be done."""
    from wapflow.service.review import reject

    now = now or datetime.now(UTC)
    out: list[ExpiryDoc] = []
    for rec in awaiting_runs(lh.store, tables):
        cfg = lh.config.table(rec.table_name)
        waited = overdue(rec, cfg, now)
        if waited is None or cfg.review_timeout is None:
            continue
        limit = cfg.review_timeout_seconds() or waited
        doc: ExpiryDoc = {
            "run_id": rec.run_id,
            "table": rec.table_name,
            "waited": age_words(waited),
            "review_timeout": cfg.review_timeout,
            "action": "",
            "message": "",
        }
        if cfg.on_review_timeout == "reject":
            if dry_run:
                doc["action"], doc["message"] = "would reject", f"run {rec.run_id} would be rejected"
            else:
                try:
                    done = reject(lh, rec.run_id, reason=timed_out_reason(cfg), by=TIMEOUT_BY)
                    doc["action"], doc["message"] = "rejected", str(done["message"])
                    _alert_expired(lh, rec.run_id, doc["message"])
                except AlreadyDecided as e:  # a person decided at the same moment: theirs stands
                    doc["action"], doc["message"] = "decided meanwhile", e.message
        else:
            period = int(waited // limit)
            key = f"{rec.run_id}:review-timeout:{period}"
            if AlertLog(lh.store.engine).seen(key=key, event=EVENT):
                doc["action"] = "alerted before"
                doc["message"] = f"run {rec.run_id}: alerted for this period ({period} x {cfg.review_timeout}) already"
            elif dry_run:
                doc["action"], doc["message"] = "would alert", f"run {rec.run_id} would be alerted again"
            else:
                message = (
                    f"run {rec.run_id} of {rec.table_name} has awaited review for {age_words(waited)}, more than "
                    f"review_timeout = {cfg.review_timeout}: approve or reject it"
                )
                if wanted(lh):
                    ev = held_event(lh, rec, key=key, message=message)
                    notify(lh.config, lh.store.engine, [ev], progress=lh.progress)
                    doc["action"], doc["message"] = "alerted", message
                else:
                    doc["action"] = "no sink"
                    doc["message"] = f"{message} (no [alerts] sink wants awaiting_review: nothing sent)"
        out.append(doc)
    return out
