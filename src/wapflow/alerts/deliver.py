"""Sending alerts: bounded retries, at most once per (occurrence, event, sink), never an exception.

- 2xx: sent. 429: wait Retry-After (capped at RETRY_AFTER_CAP seconds), try again. 5xx, a refused or reset
  connection, a timeout: exponential backoff (0.5 s, 1 s, 2 s, ... capped at 8 s), try again. Any other
  status (400 invalid payload, 403/404/410 a removed webhook): given up at once, retrying cannot help.
- At most `max_attempts` attempts of at most `timeout` seconds each: a sink that hangs or is down costs a
  bounded time, after the run's outcome is recorded, and can never change that outcome.
- The URL comes from the environment variable the sink names, at send time. It is never printed, logged
  or stored: errors are described by type and status, with the URL cut out of any text a library made.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

from wapflow.alerts.event import AlertEvent
from wapflow.alerts.payload import payload_for
from wapflow.config import AlertsConfig, AlertSinkConfig
from wapflow.faults import crash_point
from wapflow.pipeline.retry import backoff
from wapflow.redact import redact
from wapflow.runs.alerts import AlertLog

if TYPE_CHECKING:
    import httpx

RETRY_AFTER_CAP = 30.0
BACKOFF_CAP = 8.0


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
                status, error = None, f"no answer within {timeout:g}s ({type(e).__name__})"
            except httpx.TransportError as e:
                status, error = None, redact(f"{type(e).__name__}: {e}", url)[:300]
            else:
                status = resp.status_code
                if 200 <= status < 300:
                    return "sent", attempt, status, None
                text = redact(resp.text.strip(), url)[:200]
                error = f"HTTP {status}" + (f": {text}" if text else "")
                if status == 429:
                    wait = _retry_after(resp.headers.get("Retry-After"))
                elif status < 500:
                    return "failed", attempt, status, error  # not retryable: the same request fails again
            if attempt < max_attempts:
                sleep(wait)
    return "failed", max_attempts, status, error


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
    wanted = {n: s for n, s in sinks.items() if ev.event == "test" or ev.event in s.events}
    if not wanted:
        return out
    log = AlertLog(engine)
    for name, sink in wanted.items():
        row_id = log.claim(key=ev.key, run_id=ev.run_id, event=ev.event, sink=name, table=ev.table, message=ev.message)
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
