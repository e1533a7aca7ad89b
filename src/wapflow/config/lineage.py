"""[lineage]: OpenLineage run events."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from wapflow.config.base import _ENV_NAME, _Strict
from wapflow.errors import did_you_mean

LINEAGE_TRANSPORTS = ("http", "file")


class LineageConfig(_Strict):
    """[lineage]: OpenLineage run events (START, COMPLETE, FAIL, ABORT) of every run, sent through the
    `openlineage-python` client (the `lineage` extra: pip install 'wapflow[lineage]'). A receiver that is down,
    slow or failing costs at most its bounded time and one warning line: never a run's outcome or exit code."""

    # http: POST each event to the receiver (Marquez or any OpenLineage endpoint); file: append each event to
    # `path` as one JSON line.
    transport: Literal["http", "file"]
    url: str | None = None  # http: the receiver's base URL, e.g. http://127.0.0.1:5000 (or url_env)
    # http: the environment variable holding the base URL instead of `url` (a URL carrying a secret).
    url_env: str | None = Field(default=None, pattern=_ENV_NAME)
    endpoint: str = "api/v1/lineage"  # http: the path under the base URL events are POSTed to
    # http: the environment variable holding an API key, sent as a bearer token; never printed or stored.
    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME)
    path: str | None = None  # file: the JSON-lines file (relative paths resolve against wap.toml's folder)
    namespace: str = Field(default="wapflow", min_length=1)  # the OpenLineage job namespace (the job is the table)
    timeout: float = Field(default=5.0, gt=0, le=60)  # http: seconds per attempt (connect, send, answer)
    max_attempts: int = Field(default=2, ge=1, le=5)  # http: sends of one event (5xx, refused, timeouts retried)

    @field_validator("transport", mode="before")
    @classmethod
    def _transport(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in LINEAGE_TRANSPORTS:
            known = ", ".join(LINEAGE_TRANSPORTS)
            raise ValueError(f"unknown lineage transport '{v}'{did_you_mean(v, LINEAGE_TRANSPORTS)}; known: {known}")
        return v

    @model_validator(mode="after")
    def _keys_of_transport(self) -> LineageConfig:
        """Each transport's own keys, and the client installed: wap.toml asking for lineage must get it."""
        if self.transport == "http":
            if (self.url is None) == (self.url_env is None):
                raise ValueError('transport = "http" needs exactly one of url or url_env (the receiver\'s base URL)')
            if self.url is not None and not re.match(r"^https?://[^\s/]+", self.url):
                raise ValueError(f"url must be an http:// or https:// URL, got '{self.url}'")
            if self.path is not None:
                raise ValueError('path is a key of transport = "file", not "http"')
        else:
            if not self.path:
                raise ValueError('transport = "file" needs path (the JSON-lines file events are appended to)')
            extra = [k for k in ("url", "url_env", "api_key_env") if getattr(self, k) is not None]
            if extra:
                raise ValueError(f'{", ".join(extra)}: keys of transport = "http", not "file"')
        try:
            import openlineage.client  # noqa: F401 - only whether it is installed
        except ImportError:
            raise ValueError(
                "[lineage] needs the openlineage-python package, which is not installed: "
                "pip install 'wapflow[lineage]' (or remove [lineage])"
            ) from None
        return self
