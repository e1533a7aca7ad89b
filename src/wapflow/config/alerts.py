"""[alerts]: the sinks alerts go to, and the thresholds of the events that have one."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from wapflow.config.base import _plain_names, _Strict
from wapflow.errors import did_you_mean
from wapflow.vocabulary import ALERT_EVENTS

# Events an alert sink can be sent (wapflow.vocabulary.ALERT_EVENTS, each said there); a sink without `events`
# gets all of them.
SINK_TYPES = ("slack", "webhook")


class AlertSinkConfig(_Strict):
    """[alerts.sinks.NAME]: where alerts go. The URL is read from the environment variable `url_env` at send
    time: webhook URLs are secrets and never appear in wap.toml, output or the run store."""

    type: Literal["slack", "webhook"]  # slack: an incoming webhook (Block Kit); webhook: JSON wapflow.alert/v1
    url_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # the environment variable holding the URL
    events: list[str] = Field(default_factory=lambda: list(ALERT_EVENTS))  # the events this sink is sent
    timeout: float = Field(default=5.0, gt=0, le=120)  # seconds per attempt (connect, send, answer)
    max_attempts: int = Field(default=3, ge=1, le=10)  # sends of one alert (429 and 5xx are retried)

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in SINK_TYPES:
            raise ValueError(f"unknown sink type '{v}'{did_you_mean(v, SINK_TYPES)}; known: {', '.join(SINK_TYPES)}")
        return v

    @field_validator("events")
    @classmethod
    def _events(cls, v: list[str]) -> list[str]:
        for e in v:
            if e not in ALERT_EVENTS:
                raise ValueError(
                    f"unknown event '{e}'{did_you_mean(e, ALERT_EVENTS)}; known: {', '.join(ALERT_EVENTS)}"
                )
        return list(dict.fromkeys(v))


class AlertsConfig(_Strict):
    """[alerts]: sinks, and the thresholds of the events that have one."""

    sinks: dict[str, AlertSinkConfig] = Field(default_factory=dict)
    # A published run whose quarantined share of rows is above this (0..1) sends `quarantine_rate`.
    quarantine_rate_above: float | None = Field(default=None, ge=0, le=1)
    # `wap alerts check`: a branch kept for inspection longer than this many days sends `branch_kept`.
    branch_kept_days: int | None = Field(default=None, ge=0)
    # The dashboard's address as people open it (e.g. https://wap.example.com): `awaiting_review` alerts then link
    # to its Review page beside the approve / reject commands.
    dashboard_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")

    @field_validator("sinks")
    @classmethod
    def _sink_names(cls, v: dict[str, AlertSinkConfig]) -> dict[str, AlertSinkConfig]:
        return _plain_names(v, "sink")
