"""Sending alerts: bounded retries, at most once per (occurrence, event, sink), never an exception.

- 2xx: sent. 429: wait Retry-After (capped at RETRY_AFTER_CAP seconds), try again. 5xx, a refused or reset
  connection, a timeout: exponential backoff (0.5 s, 1 s, 2 s, ... capped at 8 s), try again. Any other
  status (400 invalid payload, 403/404/410 a removed webhook): given up at once, retrying cannot help.
- At most `max_attempts` attempts of at most `timeout` seconds each: a sink that hangs or is down costs a
  bounded time, after the run's outcome is recorded, and can never change that outcome.
- A delivery that failed is sent again by `resend` (`wap alerts resend`, and `wap watch` every few minutes), the
  same alert from its row, until it is sent or older than the window. Never one that may have arrived: a
  'pending' row, or a sink that answered nothing in time.
- The URL comes from the environment variable the sink names, at send time. It is never printed, logged
  or stored: errors are described by type and status, with the URL cut out of any text a library made.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from wapflow.alerts.event import AlertEvent
from wapflow.alerts.payload import payload_for
from wapflow.config import AlertsConfig, AlertSinkConfig
from wapflow.faults import crash_point
from wapflow.pipeline.retry import backoff
from wapflow.redact import redact
from wapflow.runs.alerts import AlertLog
from wapflow.vocabulary import DELIVERY_FAILED, DELIVERY_SENT, TEST_ALERT_EVENT

if TYPE_CHECKING:
    import httpx

RETRY_AFTER_CAP = 30.0
BACKOFF_CAP = 8.0
RESEND_LIMIT = 100  # failed deliveries one resend pass sends again at most (the oldest first)
# How a delivery's error starts when the sink answered nothing in time: it may have taken the alert, so such a
# delivery is never sent again (at most once), like a 'pending' one.
NO_ANSWER = "no answer within"


@dataclass
class Delivery:
    """The outcome of one alert to one sink. status: sent | failed | duplicate (claimed before: not sent)."""

    sink: str
    event: str
    status: str
    attempts: int = 0
    http_status: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "sink": self.sink,
            "event": self.event,
            "status": self.status,
            "attempts": self.attempts,
            "http_status": self.http_status,
            "error": self.error,
        }


def _retry_after(value: str | None) -> float:
    """Retry-After in seconds (the form Slack uses); 1 s when absent or a date."""
    try:
        return min(max(float(value or "1"), 0.0), RETRY_AFTER_CAP)
    except ValueError:
        return 1.0


def post(
    url: str,
    body: object,
    *,
    timeout: float,
    max_attempts: int,
    sleep: Callable[[float], None] = time.sleep,
    transport: httpx.BaseTransport | None = None,
) -> tuple[str, int, int | None, str | None]:
    """POST `body` as JSON with retries: (status sent|failed, attempts, last HTTP status, error)."""
    import httpx  # here, not at import: every run loads this module, few send anything

    content = json.dumps(body, default=str).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "wapflow-alerts"}
    status: int | None = None
    error: str | None = None
    with httpx.Client(timeout=httpx.Timeout(timeout), transport=transport, follow_redirects=False) as client:
        for attempt in range(1, max_attempts + 1):
            wait = backoff(attempt, first=0.5, cap=BACKOFF_CAP)
            try:
                resp = client.post(url, content=content, headers=headers)
            except httpx.TimeoutException as e:
                status, error = None, f"{NO_ANSWER} {timeout:g}s ({type(e).__name__})"
            except httpx.TransportError as e:
                status, error = None, redact(f"{type(e).__name__}: {e}", url)[:300]
            else:
                status = resp.status_code
                if 200 <= status < 300:
                    return DELIVERY_SENT, attempt, status, None
                text = redact(resp.text.strip(), url)[:200]
                error = f"HTTP {status}" + (f": {text}" if text else "")
                if status == 429:
                    wait = _retry_after(resp.headers.get("Retry-After"))
                elif status < 500:
                    return DELIVERY_FAILED, attempt, status, error  # not retryable: the same request fails again
            if attempt < max_attempts:
                sleep(wait)
    return DELIVERY_FAILED, max_attempts, status, error


def sink_url(name: str, sink: AlertSinkConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The sink's URL from its environment variable (None if unset or empty)."""
    value = (os.environ if env is None else env).get(sink.url_env, "").strip()
    return value or None


def dispatch(
    cfg: AlertsConfig,
    engine: sa.Engine,
    ev: AlertEvent,
    *,
    only: str | None = None,
    env: Mapping[str, str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Delivery]:
    """Send `ev` to every sink that wants its event, each once: the row is claimed before sending, so a
    second call with the same occurrence sends nothing (status 'duplicate')."""
    out: list[Delivery] = []
    sinks = {n: s for n, s in cfg.sinks.items() if (only is None or n == only)}
    wanted = {n: s for n, s in sinks.items() if ev.event == TEST_ALERT_EVENT or ev.event in s.events}
    if not wanted:
        return out
    log = AlertLog(engine)
    for name, sink in wanted.items():
        row_id = log.claim(
            key=ev.key,
            run_id=ev.run_id,
            event=ev.event,
            sink=name,
            table=ev.table,
            message=ev.message,
            event_json=json.dumps(ev.to_dict(), default=str),
        )
        if row_id is None:
            out.append(Delivery(name, ev.event, "duplicate"))
            continue
        crash_point("alert:claimed")
        url = sink_url(name, sink, env)
        error: str | None
        if url is None:
            status, attempts, http, error = "failed", 0, None, f"environment variable {sink.url_env} is not set"
        else:
            body = payload_for(sink.type, ev)
            status, attempts, http, error = post(
                url, body, timeout=sink.timeout, max_attempts=sink.max_attempts, sleep=sleep
            )
        log.finish(row_id, status=status, attempts=attempts, http_status=http, error=error)
        out.append(Delivery(name, ev.event, status, attempts, http, error))
    return out


def resend(
    cfg: AlertsConfig,
    engine: sa.Engine,
    since: datetime,
    *,
    limit: int = RESEND_LIMIT,
    env: Mapping[str, str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Delivery]:
    """Send again the deliveries that failed since `since` (oldest first, at most `limit`), each to its sink as it
    is configured now; a sink gone from wap.toml, or one that no longer wants the event, is left as it was. A
    sink that fails again is not tried for its other rows in this pass (it is still down: each row would cost
    its timeouts). Two resends at once send a row once (AlertLog.retake)."""
    log = AlertLog(engine)
    out: list[Delivery] = []
    down: set[str] = set()
    for row in log.failed_since(since, limit):
        name = row["sink"]
        if row["http_status"] is None and str(row["error"] or "").startswith(NO_ANSWER):
            continue  # perhaps taken: at most once
        sink = cfg.sinks.get(name)
        if sink is None or name in down or row["event"] not in sink.events:  # a test alert is never resent
            continue
        url = sink_url(name, sink, env)
        if url is None or not log.retake(row["id"]):
            continue
        ev = AlertEvent.from_dict(json.loads(row["event_json"]))
        status, attempts, http, error = post(
            url, payload_for(sink.type, ev), timeout=sink.timeout, max_attempts=sink.max_attempts, sleep=sleep
        )
        attempts += row["attempts"]
        log.finish(row["id"], status=status, attempts=attempts, http_status=http, error=error)
        out.append(Delivery(name, ev.event, status, attempts, http, error))
        if status != DELIVERY_SENT:
            down.add(name)
    return out
