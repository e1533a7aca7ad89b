"""What an alert says: one event of one run (or branch), with what a person needs to act on it."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from wapflow.display import number, percent
from wapflow.pipeline.result import RunResult
from wapflow.pipeline.retry import retryable
from wapflow.runs.store import RunRecord
from wapflow.vocabulary import ALERT_TITLES, TEST_ALERT_EVENT

MAX_SAMPLES = 3


@dataclass
class FailedCheck:
    name: str
    observed: Any
    threshold: str
    failing_rows: int | None = None

    @classmethod
    def of(cls, check: dict[str, Any]) -> FailedCheck:
        """A check of a run's report (RunResult.checks / RunRecord.checks), as an alert shows it."""
        return cls(
            name=str(check.get("name")),
            observed=check.get("observed"),
            threshold=str(check.get("threshold") or ""),
            failing_rows=check.get("failing_rows"),
        )


@dataclass
class AlertEvent:
    """One alert. `key` makes it one occurrence (see wapflow.runs.alerts); it defaults to the run id."""

    event: str
    table: str | None
    run_id: str | None
    status: str
    message: str
    branch: str | None = None
    source: str | None = None
    files: list[str] = field(default_factory=list)
    failed_checks: list[FailedCheck] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    # awaiting_review: the warn-severity checks that failed, and what publishing would change (service.diff.summary:
    # rows added / updated / deleted / replaced, notable column changes, one line of text).
    warned_checks: list[FailedCheck] = field(default_factory=list)
    diff: dict[str, Any] | None = None
    link: str | None = None  # awaiting_review: the dashboard's Review page ([alerts] dashboard_url)
    key: str = ""
    occurred_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:
        if not self.key:
            self.key = self.run_id or self.branch or self.occurred_at

    @property
    def title(self) -> str:
        return ALERT_TITLES.get(self.event, self.event)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AlertEvent:
        d = dict(d)
        d["failed_checks"] = [FailedCheck(**c) for c in d.get("failed_checks") or []]
        d["warned_checks"] = [FailedCheck(**c) for c in d.get("warned_checks") or []]
        return cls(**d)


def commands_for(table: str | None, run_id: str | None, branch: str | None, *, source: str | None = None) -> list[str]:
    """The commands that show what happened and what to do next."""
    out: list[str] = []
    if run_id:
        out.append(shlex.join(["wap", "report", run_id]))
    if table and branch:
        out.append(shlex.join(["wap", "query", f"SELECT * FROM {table} LIMIT 20", "--branch", branch]))
        out.append(shlex.join(["wap", "discard", branch, "--table", table]))
    if source and run_id:
        out.append(shlex.join(["wap", "retry", run_id]))
    return out


def review_commands(run_id: str) -> list[str]:
    """What a reviewer runs: see the change, then approve or reject it (a reason is required by both)."""
    run = shlex.quote(run_id)
    return [
        f"wap diff {run}",
        f'wap approve {run} --reason "..."',
        f'wap reject {run} --reason "..."',
        f"wap report {run}",
    ]


def held_for_review(
    rec: RunRecord,
    diff: Mapping[str, Any] | None,
    *,
    message: str | None = None,
    source: str | None = None,
    key: str | None = None,
    dashboard_url: str | None = None,
) -> AlertEvent:
    """A run the table's `review` holds: its warned checks, what publishing would change (`diff`: a
    service.diff summary, None when it could not be read) and the commands to approve or reject it."""
    warned = [c for c in rec.checks if c.get("status") == "warned"]
    change = f"; publishing would {diff['text']}" if diff and diff.get("text") else ""
    default = (
        f"run {rec.run_id} of {rec.table_name} passed its audit and awaits review"
        + (f" (warning(s): {', '.join(str(c.get('name')) for c in warned)})" if warned else "")
        + f"{change}; main unchanged until someone approves it"
    )
    return AlertEvent(
        event="awaiting_review",
        table=rec.table_name,
        run_id=rec.run_id,
        status=rec.status,
        message=message or default,
        branch=rec.branch if rec.branch_kept else None,
        source=source,
        files=[f["uri"] for f in rec.file_ids] or list(rec.files),
        warned_checks=[FailedCheck.of(c) for c in warned],
        diff=dict(diff) if diff is not None else None,
        commands=review_commands(rec.run_id),
        link=f"{dashboard_url.rstrip('/')}/?page=Review" if dashboard_url else None,
        key=key or rec.run_id,
    )


def review_expired(rec: RunRecord, message: str) -> AlertEvent:
    """A held run that `on_review_timeout = "reject"` rejected because nobody decided in time: nobody saw it go,
    so the sinks are told (its files are `rejected` in the ledger; `wap report` says what it held)."""
    return AlertEvent(
        event="review_expired",
        table=rec.table_name,
        run_id=rec.run_id,
        status=rec.status,
        message=message,
        files=[f["uri"] for f in rec.file_ids] or list(rec.files),
        warned_checks=[FailedCheck.of(c) for c in rec.checks if c.get("status") == "warned"],
        commands=[f"wap report {shlex.quote(rec.run_id)}"],
        key=f"{rec.run_id}:review-expired",
    )


def from_run(
    res: RunResult,
    event: str,
    *,
    source: str | None = None,
    key: str | None = None,
    message: str | None = None,
    status: str | None = None,
) -> AlertEvent:
    """An alert about a run: its failed checks (observed vs threshold), a few failing rows, its commands."""
    failed = [c for c in res.checks if c.get("status") == "failed"]
    samples: list[dict[str, Any]] = []
    for c in failed:
        for s in cast(list[dict[str, Any]], c.get("samples") or []):
            if len(samples) < MAX_SAMPLES:
                samples.append(s)
    branch = res.branch if res.branch_kept else None
    error = res.error
    if error:
        error = {k: error.get(k) for k in ("type", "kind", "message", "hint", "step", "retryable") if k in error}
    return AlertEvent(
        event=event,
        table=res.table,
        run_id=res.run_id,
        status=status or res.status,
        message=message or res.message or (error or {}).get("message") or res.status,
        branch=branch,
        source=source,
        files=list(res.files),
        failed_checks=[FailedCheck.of(c) for c in failed],
        samples=samples,
        commands=commands_for(res.table, res.run_id, branch, source=source),
        error=error,
        key=key or res.run_id,
    )


def quarantine_rate(res: RunResult) -> float | None:
    """The share of a published run's rows that went to quarantine (None when it quarantined nothing)."""
    q = res.quarantined_rows or 0
    if not q:
        return None
    return q / (q + (res.rows_written or 0))


def events_for_run(
    res: RunResult, *, quarantine_rate_above: float | None, source: str | None = None, key: str | None = None
) -> list[AlertEvent]:
    """What a finished `wap run` alerts about: blocked, failed (terminal only: a transient failure is the
    caller's to retry), a quarantine rate above the threshold."""
    if res.status == "blocked":
        return [from_run(res, "blocked", source=source, key=key)]
    if res.status == "failed" and not retryable(res.error):
        return [from_run(res, "failed", source=source, key=key)]
    rate = quarantine_rate(res)
    limit = quarantine_rate_above
    if res.status == "published" and limit is not None and rate is not None and rate > limit:
        quarantined = res.quarantined_rows or 0
        whole = quarantined + (res.rows_written or 0)
        msg = (
            f"{number(quarantined, grouped=True)} of {number(whole, grouped=True)} row(s) quarantined "
            f"({percent(rate)}), above {percent(limit)}"
        )
        ev = from_run(res, "quarantine_rate", source=source, key=key, message=msg)
        ev.failed_checks.append(FailedCheck(name="quarantine_rate", observed=round(rate, 6), threshold=f"<= {limit}"))
        return [ev]
    return []


def sample_event() -> AlertEvent:
    """What `wap alerts test` sends: a realistic blocked run, marked as a test."""
    return AlertEvent(
        event=TEST_ALERT_EVENT,
        table="nyc.trips",
        run_id="test_" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f"),
        status="blocked",
        message="This is a test alert from `wap alerts test`: no run was blocked.",
        branch="wap_example",
        files=["landing/trips/2026-01-01.parquet"],
        failed_checks=[
            FailedCheck(name="not_null(passenger_count)", observed=12, threshold="= 0", failing_rows=12),
        ],
        samples=[{"trip_id": 17, "passenger_count": None}],
        commands=commands_for("nyc.trips", "example", "wap_example"),
    )
