"""[dashboard] and [dashboard.oidc]: how `wap dashboard` lets people decide."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from wapflow.config.base import _ENV_NAME, _Strict


class OidcConfig(_Strict):
    """[dashboard.oidc]: people log in to the dashboard with an OpenID Connect provider (Streamlit's `st.login`;
    the `dashboard` extra installs Authlib) before they approve or reject a run, on any bind address; the
    decision records who the provider says they are (the verified email, else the subject). `wap dashboard`
    hands these settings to Streamlit as its `[auth]` secrets in a private file: no .streamlit/secrets.toml to
    write. Secrets stay in the environment: wap.toml names the variables, never holds the values."""

    # The provider's name as the Review page shows it: "Log in with <provider>".
    provider: str = Field(default="OpenID Connect", min_length=1, max_length=64)
    # The provider's discovery document, e.g. https://accounts.google.com/.well-known/openid-configuration;
    # `wap dashboard` fetches it at start and refuses to start (exit 2) when it does not answer.
    server_metadata_url: str = Field(pattern=r"^https?://[^\s]+$")
    client_id: str = Field(min_length=1)  # the client (application) id registered with the provider
    # The environment variable holding the client secret (required; read when `wap dashboard` starts).
    client_secret_env: str = Field(pattern=_ENV_NAME)
    # The environment variable holding the secret that signs the login cookie; unset: a random one per start
    # (restarting the dashboard then logs everyone out).
    cookie_secret_env: str | None = Field(default=None, pattern=_ENV_NAME)
    # Where the provider sends people back, registered with the provider; it ends in /oauth2callback. Unset:
    # [alerts] dashboard_url + /oauth2callback, else http://HOST:PORT/oauth2callback of `wap dashboard`.
    redirect_uri: str | None = Field(default=None, pattern=r"^https?://[^\s]+/oauth2callback$")
    # Who may decide once logged in: emails, subject ids or patterns such as "*@example.com" (case-insensitive).
    # Empty: anyone the provider logs in for this client (with Google: any Google account, unless the client is
    # limited to your organisation's users).
    allow: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _no_secret_values(cls, data: Any) -> Any:
        """A secret written into wap.toml is refused without echoing it: wap.toml names variables instead."""
        if isinstance(data, dict):
            for key in ("client_secret", "cookie_secret"):
                if key in data:
                    raise ValueError(
                        f"{key} does not go in wap.toml (a file people share and commit): put it in an environment "
                        f"variable and name that variable in {key}_env"
                    )
        return data

    @field_validator("allow")
    @classmethod
    def _allow(cls, v: list[str]) -> list[str]:
        if any(not p.strip() for p in v):
            raise ValueError("an empty entry would allow nobody: give emails or patterns such as '*@example.com'")
        return [p.strip() for p in v]

    @field_validator("client_id", "provider")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v.strip()


class DashboardConfig(_Strict):
    """[dashboard]: how `wap dashboard` lets people decide. Without [dashboard.oidc], anyone at this machine
    decides on a loopback-bound dashboard, and beyond loopback after entering $WAP_DASHBOARD_TOKEN."""

    # [dashboard.oidc]: log in with an OpenID Connect provider to approve or reject (None: no OIDC login).
    oidc: OidcConfig | None = None
