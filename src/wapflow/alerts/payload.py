"""The bodies sent to sinks: Slack Block Kit (with a `text` fallback) and the versioned JSON payload.

Slack's limits are kept here (header text <= 150 characters, section text <= 3000, <= 10 fields per
section) so a long check name or a wide sample row can never make Slack refuse the message (400
invalid_payload is not retried).
"""

from __future__ import annotations

import json
from typing import Any

from wapflow import __version__
from wapflow.alerts.event import AlertEvent
from wapflow.display import number

SCHEMA = "wapflow.alert/v1"
HEADER_MAX = 150
SECTION_MAX = 3000
FIELD_MAX = 2000
FIELDS_MAX = 10


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _esc(text: str) -> str:
    """Slack mrkdwn: &, < and > are control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _value(v: Any) -> str:
    """An observed value as people read it (wapflow.display: `12,001`, `0.1667`, never `1.2e+04`); the JSON
    payload keeps the machine value."""
    if isinstance(v, str):
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        return number(v, grouped=True)
    return json.dumps(v, default=str)


def _count(n: Any) -> str:
    return number(n, grouped=True) if isinstance(n, int | float) and not isinstance(n, bool) else str(n)


def fallback_text(ev: AlertEvent) -> str:
    """One line for notifications and clients that show no blocks."""
    where = f"{ev.table} " if ev.table else ""
    run = f"run {ev.run_id} " if ev.run_id else ""
    return _cut(f"wapflow: {ev.title}: {where}{run}({ev.status}): {ev.message}", SECTION_MAX)


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, SECTION_MAX)}}


def _diff_text(diff: dict[str, Any]) -> str:
    """What publishing a held run would change: its rows, then the notable column changes (service.diff.summary)."""
    rows = diff.get("rows")
    if not rows:  # no figures recorded: the summary's own words
        return "*What publishing changes*\n" + _esc(str(diff.get("text") or "?"))
    kinds = ("added", "updated", "deleted", "replaced")
    figures = [f"{_count(rows.get(k, 0))} {k}" for k in kinds if rows.get(k) or k == "added"]
    lines = [
        "*What publishing changes*",
        "rows: " + ", ".join(figures) + f" (main has {_count(rows.get('main_rows', '?'))})",
    ]
    lines += [f"• {_esc(n)}" for n in diff.get("notable") or []]
    if diff.get("more_notable"):
        lines.append(f"• … {diff['more_notable']} more column change(s)")
    lines += [f"• sample keys {_esc(k)}" for k in diff.get("keys") or []]
    return "\n".join(lines)


def slack_payload(ev: AlertEvent) -> dict[str, Any]:
    """Block Kit: header, the run's fields, the message, failed checks (observed vs threshold), a few failing
    rows, the commands to inspect; `text` is the fallback."""
    head = f"{ev.title}: {ev.table}" if ev.table else ev.title
    fields = [
        ("Table", ev.table),
        ("Run", ev.run_id),
        ("Branch", ev.branch),
        ("Status", ev.status),
        ("Event", ev.event),
        ("Source", ev.source),
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(head, HEADER_MAX), "emoji": False}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": _cut(f"*{name}*\n{_esc(str(value))}", FIELD_MAX)}
                for name, value in fields
                if value
            ][:FIELDS_MAX],
        },
        _section(_esc(ev.message)),
    ]
    if ev.failed_checks:
        lines = [
            f"• `{_esc(c.name)}`: observed *{_esc(_value(c.observed))}*, threshold {_esc(c.threshold or '-')}"
            + (f" ({_count(c.failing_rows)} failing row(s))" if c.failing_rows else "")
            for c in ev.failed_checks
        ]
        blocks.append(_section("*Failed checks*\n" + "\n".join(lines)))
    if ev.warned_checks:
        lines = [
            f"• `{_esc(c.name)}`: observed *{_esc(_value(c.observed))}*, threshold {_esc(c.threshold or '-')}"
            for c in ev.warned_checks
        ]
        blocks.append(_section("*Warned checks*\n" + "\n".join(lines)))
    if ev.diff is not None:
        blocks.append(_section(_diff_text(ev.diff)))
    if ev.samples:
        rows = "\n".join(_esc(json.dumps(s, default=str)) for s in ev.samples)
        blocks.append(_section(_cut("*Sample values*\n```" + rows, SECTION_MAX - 3) + "```"))
    if ev.commands:
        verb = "Decide" if ev.event == "awaiting_review" else "Inspect"
        blocks.append(
            _section(_cut(f"*{verb}*\n```" + "\n".join(_esc(c) for c in ev.commands), SECTION_MAX - 3) + "```")
        )
    if ev.link:
        blocks.append(_section(f"<{_esc(ev.link)}|Open the review queue> in the dashboard"))
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"wapflow {__version__} · {ev.occurred_at}"}]}
    )
    return {"text": fallback_text(ev), "blocks": blocks}


def webhook_payload(ev: AlertEvent) -> dict[str, Any]:
    """The generic webhook's JSON (docs/guides/alerts.md, schema wapflow.alert/v1): fields are only ever added
    within v1; a change of meaning is a new schema name."""
    return {
        "schema": SCHEMA,
        "event": ev.event,
        "title": ev.title,
        "table": ev.table,
        "run_id": ev.run_id,
        "branch": ev.branch,
        "status": ev.status,
        "message": ev.message,
        "source": ev.source,
        "files": ev.files,
        "failed_checks": [
            {"name": c.name, "observed": c.observed, "threshold": c.threshold, "failing_rows": c.failing_rows}
            for c in ev.failed_checks
        ],
        "warned_checks": [
            {"name": c.name, "observed": c.observed, "threshold": c.threshold, "failing_rows": c.failing_rows}
            for c in ev.warned_checks
        ],
        "diff": ev.diff,
        "link": ev.link,
        "samples": ev.samples,
        "commands": ev.commands,
        "error": ev.error,
        "occurred_at": ev.occurred_at,
        "wapflow_version": __version__,
    }


def payload_for(sink_type: str, ev: AlertEvent) -> dict[str, Any]:
    return slack_payload(ev) if sink_type == "slack" else webhook_payload(ev)
